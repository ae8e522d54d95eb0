package routing

import (
	"math"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
)

func TestMeetsSLO(t *testing.T) {
	slo := SLO{TTFT: 500 * time.Millisecond, TPOT: 50 * time.Millisecond}
	tests := []struct {
		name  string
		s     loadgen.Sample
		scale float64
		want  bool
	}{
		{"within both", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 400, TPOTMS: 40}, 1, true},
		{"TTFT at the bound", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 500, TPOTMS: 50}, 1, true},
		{"TTFT over", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 501, TPOTMS: 40}, 1, false},
		{"TPOT over", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 100, TPOTMS: 51}, 1, false},
		{"wall within, model over", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 300, TPOTMS: 10}, 2, false},
		{"wall scaled within", loadgen.Sample{OK: true, Tokens: 10, TTFTMS: 100, TPOTMS: 20}, 2, true},
		{"one token: no TPOT", loadgen.Sample{OK: true, Tokens: 1, TTFTMS: 100}, 1, true},
		{"failed", loadgen.Sample{OK: false, Tokens: 10, TTFTMS: 10, TPOTMS: 1}, 1, false},
		{"no token", loadgen.Sample{OK: true, Tokens: 0, E2EMS: 10}, 1, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MeetsSLO(tt.s, tt.scale, slo); got != tt.want {
				t.Fatalf("MeetsSLO(%+v, %v) = %v, want %v", tt.s, tt.scale, got, tt.want)
			}
		})
	}
}

func TestSummarize(t *testing.T) {
	slo := SLO{TTFT: 100 * time.Millisecond, TPOT: 10 * time.Millisecond}
	var samples []loadgen.Sample
	// Phase a: 100 good requests with TTFT 1..100 ms wall, TPOT 2 ms wall; a 503 and one in
	// another phase. At time scale 2, TTFT is 2..200 model ms: 50 of 101 meet the TTFT SLO.
	for i := 1; i <= 100; i++ {
		samples = append(samples, loadgen.Sample{Kind: "a/x", OK: true, Status: 200, Tokens: 5, Decision: "prefill-decode",
			TTFTMS: float64(i), TPOTMS: 2, E2EMS: float64(i) + 8})
	}
	samples = append(samples, loadgen.Sample{Kind: "a/x", Status: 503},
		loadgen.Sample{Kind: "b/x", OK: true, Tokens: 5, TTFTMS: 1000, TPOTMS: 1000, E2EMS: 5000})
	got := Summarize(samples, "a", 2, slo)
	if got.Requests != 101 || got.OK != 100 || got.Decisions["prefill-decode"] != 100 {
		t.Fatalf("counts %+v", got)
	}
	if got.TTFT != (Quantiles{P50: 100, P90: 180, P99: 198}) || got.TPOT != (Quantiles{P50: 4, P90: 4, P99: 4}) {
		t.Fatalf("quantiles TTFT %+v TPOT %+v", got.TTFT, got.TPOT)
	}
	if want := 50.0 / 101; math.Abs(got.Goodput-want) > 1e-12 {
		t.Fatalf("goodput %v, want %v", got.Goodput, want)
	}
	if len(got.TTFTs) != 100 {
		t.Fatalf("kept %d TTFTs", len(got.TTFTs))
	}
	// A phase prefix must not match a longer phase name.
	if empty := Summarize(samples, "a/x", 1, slo); empty.Requests != 0 || !math.IsNaN(empty.TTFT.P99) {
		t.Fatalf("phase %q matched: %+v", "a/x", empty)
	}
}
