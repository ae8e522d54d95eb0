package simbench

import (
	"math/rand"
	"path/filepath"
	"runtime"
	"slices"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/internal/listgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

func repoFile(rel string) string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..", "..", "..", rel)
}

func promptArrival(at time.Duration, text string, out int) Arrival {
	return Arrival{At: at, Kind: "test", Output: out, Bytes: len(text),
		Body:   &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: text}}},
		Tokens: tokensOf(nil, []byte(text))}
}

func run(t *testing.T, cfg Config) *Result {
	t.Helper()
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// One request on an idle fleet: the latencies are the cost model's, term by term.
func TestSingleRequestMatchesCostModel(t *testing.T) {
	prof := costmodel.Default()
	const promptTokens, out = 1000, 20
	text := workload.Text(rand.New(rand.NewSource(1)), promptTokens)
	n := len(tokensOf(nil, []byte(text)))
	decodeSteps := func(startKV int) time.Duration {
		var d time.Duration
		for i := 1; i < out; i++ { // the first token comes with the prefill (or first decode) step
			d += prof.DecodeStep(1, startKV+i)
		}
		return d
	}
	tests := []struct {
		name             string
		pods             []PodSpec
		config           string
		over             Overheads
		wantTTFT, wantE2 time.Duration
	}{
		{
			name: "combined pod, GIE default config", pods: FleetCombined(1, "m"),
			wantTTFT: prof.PrefillTime(n, 0),
			wantE2:   prof.PrefillTime(n, 0) + decodeSteps(n),
		},
		{
			name: "P/D pair, llm-d pd config", pods: FleetPD(2, "m"), config: "config/llmd/pd.yaml",
			// prefill leg, KV transfer, then the decode pod's first step emits the first token
			wantTTFT: prof.PrefillTime(n, 0) + prof.KVTransferTime(n) + prof.DecodeStep(1, n),
			wantE2:   prof.PrefillTime(n, 0) + prof.KVTransferTime(n) + prof.DecodeStep(1, n) + decodeSteps(n),
		},
		{
			name: "P/D pair with overheads", pods: FleetPD(2, "m"), config: "config/llmd/pd.yaml",
			over: Overheads{Route: 3 * time.Millisecond, Hop: time.Millisecond},
			// route + 7 hops (gateway→sidecar, →prefill, ←prefill, →decode engine, pull round
			// trip, tokens back through sidecar and gateway)
			wantTTFT: 3*time.Millisecond + 8*time.Millisecond + prof.PrefillTime(n, 0) + prof.KVTransferTime(n) + prof.DecodeStep(1, n),
			wantE2:   3*time.Millisecond + 8*time.Millisecond + prof.PrefillTime(n, 0) + prof.KVTransferTime(n) + prof.DecodeStep(1, n) + decodeSteps(n),
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := Config{Profile: prof, Pods: tc.pods, Model: "m", Overheads: tc.over,
				Source: listgen.New([]Arrival{promptArrival(0, text, out)})}
			if tc.config != "" {
				cfg.EPPConfig = repoFile(tc.config)
			}
			res := run(t, cfg)
			if res.sent != 1 || len(res.ttft) != 1 {
				t.Fatalf("sent %d served %d failed %v, want 1 served", res.sent, len(res.ttft), res.failed)
			}
			if got, want := res.ttft[0], ms(tc.wantTTFT); !near(got, want) {
				t.Errorf("TTFT %.3f ms, want %.3f ms", got, want)
			}
			if got, want := res.e2e[0], ms(tc.wantE2); !near(got, want) {
				t.Errorf("E2E %.3f ms, want %.3f ms", got, want)
			}
		})
	}
}

func near(a, b float64) bool { return a-b < 1e-6 && b-a < 1e-6 }

// Every request ends exactly once, under load, whatever the policy picks.
func TestConservation(t *testing.T) {
	rows := []workload.AzureRow{
		{Offset: 0, ContextTokens: 300, GeneratedTokens: 30},
		{Offset: 40 * time.Millisecond, ContextTokens: 2500, GeneratedTokens: 10},
		{Offset: 50 * time.Millisecond, ContextTokens: 40, GeneratedTokens: 80},
		{Offset: 90 * time.Millisecond, ContextTokens: 900, GeneratedTokens: 1},
	}
	for _, tc := range []struct {
		name, config string
		pods         []PodSpec
	}{
		{"gie-default combined", "", FleetCombined(4, "m")},
		{"llm-d pd", "config/llmd/pd.yaml", FleetPD(4, "m")},
		{"aibrix token_load", "config/aibrix/token-load.yaml", FleetPD(4, "m")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, err := NewAzureSource(rows, 200, 1, 400, 0)
			if err != nil {
				t.Fatal(err)
			}
			var arrivals []int
			cfg := Config{Profile: costmodel.Default(), Pods: tc.pods, Model: "m", Source: src,
				OnArrival: func(n int) { arrivals = append(arrivals, n) }}
			if tc.config != "" {
				cfg.EPPConfig = repoFile(tc.config)
			}
			res := run(t, cfg)
			if len(arrivals) != 400 || arrivals[0] != 1 || arrivals[399] != 400 {
				t.Errorf("OnArrival saw %d calls (first %v), want 1..400", len(arrivals), arrivals[:min(3, len(arrivals))])
			}
			failed := 0
			for _, n := range res.failed {
				failed += n
			}
			if res.sent != 400 || res.ended != 400 || len(res.ttft)+failed != 400 {
				t.Fatalf("sent %d ended %d served %d failed %v, want all 400 ended once", res.sent, res.ended, len(res.ttft), res.failed)
			}
			if failed != 0 {
				t.Errorf("failures %v", res.failed)
			}
			done := 0
			for _, p := range res.perPod {
				done += p.done
			}
			if done != len(res.ttft) {
				t.Errorf("per-pod completions %d, served %d", done, len(res.ttft))
			}
			for i := range res.ttft {
				if !(res.ttft[i] > 0 && res.e2e[i] >= res.ttft[i]) {
					t.Fatalf("request %d: TTFT %.3f E2E %.3f", i, res.ttft[i], res.e2e[i])
				}
			}
		})
	}
}

// The same seed gives the same run (one pod: no tie-break randomness in the picks).
func TestDeterministic(t *testing.T) {
	once := func() []float64 {
		gen, err := workload.New("chat", workload.Options{Model: "m", Seed: 7})
		if err != nil {
			t.Fatal(err)
		}
		res := run(t, Config{Profile: costmodel.Default(), Pods: FleetCombined(1, "m"), Model: "m",
			Source: NewGeneratorSource(gen, 300, 7, 300)})
		return append(slices.Clone(res.ttft), res.e2e...)
	}
	a, b := once(), once()
	if !slices.Equal(a, b) {
		t.Fatal("two runs with the same seed differ")
	}
	if len(a) != 600 {
		t.Fatalf("got %d values, want 600", len(a))
	}
}
