package simbench

import (
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

func testProfile() *costmodel.Profile {
	p := &costmodel.Profile{Name: "t", Model: "m", BlockSize: 16, ChunkedPrefillTokens: 2048}
	p.Prefill.OverheadMs = 5
	p.Prefill.LinearMsPerToken = 0.01
	p.Decode.BaseMs = 6
	return p
}

func TestUnloadedPrefillPaysOverheadPerChunk(t *testing.T) {
	p := testProfile()
	for _, tc := range []struct {
		n    int
		want time.Duration
	}{
		{1000, 15 * time.Millisecond},    // 1 chunk: 5 + 10
		{2048, 25480 * time.Microsecond}, // 1 chunk: 5 + 20.48
		{4096, 50960 * time.Microsecond}, // 2 chunks: 10 + 40.96
		{4097, 55970 * time.Microsecond}, // 3 chunks: 15 + 40.97
	} {
		if got := UnloadedPrefill(p, tc.n); got != tc.want {
			t.Errorf("UnloadedPrefill(%d) = %v, want %v", tc.n, got, tc.want)
		}
	}
}

func TestDeriveSLOs(t *testing.T) {
	p := testProfile()
	o := GoodputDefaults()
	st := WorkloadStats{MedianPrompt: 1000, MeanOutput: 200}
	got := o.DeriveSLOs(p, st)
	// prefill 15 ms: interactive 5× = 75 → 80 ms (10 ms up), relaxed 25× = 375 → 380 ms;
	// decode step 6 ms: 1.5× = 9 ms, 7× = 42 ms
	want := []report.SLO{{Name: "interactive", TTFT: 80 * time.Millisecond, TPOT: 9 * time.Millisecond},
		{Name: "relaxed", TTFT: 380 * time.Millisecond, TPOT: 42 * time.Millisecond}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("DeriveSLOs = %+v, want %+v", got, want)
	}
	o.SLOs = []report.SLO{{Name: "x", TTFT: time.Second, TPOT: time.Millisecond}}
	if got := o.DeriveSLOs(p, st); len(got) != 1 || got[0] != o.SLOs[0] {
		t.Errorf("explicit SLOs not kept: %+v", got)
	}
}

func TestParseCells(t *testing.T) {
	pols := GoodputPolicies(".")
	cells, err := ParseCells(DefaultGoodputCells, pols)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, c := range cells {
		names = append(names, c.Name())
	}
	// 1 combined + 5 P/D policies on pd and on hybrid + 2 ratios
	if len(cells) != 13 || names[0] != "combined/least-request-combined" || names[1] != "pd-1:1/least-request" || names[12] != "pd-1:2/recommended" {
		t.Fatalf("cells = %v", names)
	}
	own, err := ParseCells("pd-1:1/mine=/tmp/mine.yaml,combined/c=rel/c.yaml", pols)
	if err != nil {
		t.Fatal(err)
	}
	if len(own) != 2 || own[0].Name() != "pd-1:1/mine" || own[0].Policy.Config != "/tmp/mine.yaml" || own[0].Policy.Fleet != FleetKindPD ||
		own[1].Policy.Fleet != FleetKindCombined || own[1].Policy.configPath("/root") != "/root/rel/c.yaml" {
		t.Fatalf("own configs: %+v", own)
	}
	for _, bad := range []string{"", "pd", "pd/nope", "combined/recommended", "pd/least-request-combined", "x/recommended", "pd/=x.yaml", "pd/mine="} {
		if _, err := ParseCells(bad, pols); err == nil {
			t.Errorf("ParseCells(%q): no error", bad)
		}
	}
}

func TestGoodputWorkloadsAreSeededAndReuseAsDocumented(t *testing.T) {
	for _, tc := range []struct {
		name               string
		minReuse, maxReuse float64
		minMedian          float64
	}{
		{WorkloadSessions, 0.5, 0.95, 1000},
		{WorkloadRAG, 0.2, 0.8, 3000},
	} {
		a, err := SampleWorkload(tc.name, Traces{}, 7, 1000, 16)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := SampleWorkload(tc.name, Traces{}, 7, 1000, 16)
		if a != b {
			t.Errorf("%s: same seed, different samples: %+v vs %+v", tc.name, a, b)
		}
		if a.MeanReuse < tc.minReuse || a.MeanReuse > tc.maxReuse || a.MedianPrompt < tc.minMedian {
			t.Errorf("%s: %+v outside the documented shape", tc.name, a)
		}
	}
}

func TestSessionsRateAndOrder(t *testing.T) {
	src, err := NewSessionsSource(DefaultSessions, 100, 1, 5000)
	if err != nil {
		t.Fatal(err)
	}
	var last time.Duration
	n := 0
	keys := map[string]int{}
	for {
		a, ok := src.Next()
		if !ok {
			break
		}
		if a.At < last {
			t.Fatalf("arrival %d at %v before %v", n, a.At, last)
		}
		last = a.At
		keys[a.Headers["x-aibrix-session-key"]]++
		n++
	}
	if n != 5000 {
		t.Fatalf("%d arrivals", n)
	}
	// mean rate within 10 % of 100 req/s over 50 s
	if rate := float64(n) / last.Seconds(); rate < 90 || rate > 110 {
		t.Errorf("rate %.1f req/s, want about 100", rate)
	}
	if len(keys) >= n/2 {
		t.Errorf("%d sessions for %d turns: conversations do not continue", len(keys), n)
	}
}

func TestCrossing(t *testing.T) {
	pts := func(xy ...float64) []report.RatePoint {
		var out []report.RatePoint
		for i := 0; i < len(xy); i += 2 {
			out = append(out, report.RatePoint{Rate: xy[i], Attainment: xy[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name   string
		pts    []report.RatePoint
		lo, hi float64
		ok     bool
	}{
		{"bracket", pts(1, 1, 2, 0.95, 3, 0.5), 2, 3, true},
		{"first crossing", pts(1, 1, 2, 0.5, 3, 0.95, 4, 0.1), 1, 2, true},
		{"below at the start", pts(1, 0.5, 2, 0.4), 0, 0, false},
		{"never below", pts(1, 1, 2, 0.9), 0, 0, false},
	} {
		lo, hi, ok := crossing(tc.pts, 0.9)
		if lo != tc.lo || hi != tc.hi || ok != tc.ok {
			t.Errorf("%s: crossing = %v, %v, %v", tc.name, lo, hi, ok)
		}
	}
}
