package simbench

import (
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/internal/validatetest"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestValidateNamesTheFlag(t *testing.T) {
	validatetest.Options(t, Defaults(), []validatetest.Case[Options]{
		{Name: "defaults", Change: func(*Options) {}},
		{Name: "odd pods", Change: func(o *Options) { o.Pods = 3 }, Want: "--pods"},
		{Name: "no requests", Change: func(o *Options) { o.Requests = 0 }, Want: "--requests"},
		{Name: "no loads", Change: func(o *Options) { o.Loads = nil }, Want: "--loads"},
		{Name: "slo", Change: func(o *Options) { o.SLO.TPOT = 0 }, Want: "--slo-tpot"},
		{Name: "scrape", Change: func(o *Options) { o.Scrape = 0 }, Want: "--scrape-interval"},
		{Name: "overhead", Change: func(o *Options) { o.Overheads.Hop = -time.Millisecond }, Want: "--hop-overhead"},
		{Name: "parallel", Change: func(o *Options) { o.Parallel = 0 }, Want: "--parallel"},
		{Name: "tolerance", Change: func(o *Options) { o.Tolerance = 0 }, Want: "--tolerance"},
		{Name: "shape", Change: func(o *Options) { o.Shape = "pd-2:1" }},
		{Name: "bad shape", Change: func(o *Options) { o.Shape = "pd-2" }, Want: "--shape"},
		{Name: "hybrid shape", Change: func(o *Options) { o.Shape = "hybrid-1:1:2" }, Want: "--shape"},
	})
}

func TestShapedFleet(t *testing.T) {
	tests := []struct {
		shape                   string
		fleet                   string
		prefill, decode, others int
	}{
		{"", FleetKindPD, 32, 32, 0},
		{"pd-2:1", FleetKindPD, 43, 21, 0},
		{"pd-1:3", FleetKindPD, 16, 48, 0},
		{"pd-2:1", FleetKindCombined, 0, 0, 64},
	}
	for _, tc := range tests {
		p := Policy{Name: "p", Fleet: tc.fleet, Annotations: map[string]string{"k": "v"}}
		pods, err := p.shapedFleet(64, tc.shape, "m")
		if err != nil {
			t.Fatalf("%q %v: %v", tc.shape, tc.fleet, err)
		}
		counts := map[string]int{}
		for _, pod := range pods {
			counts[pod.Role]++
			if len(p.Annotations) > 0 && pod.Labels[protocol.AnnotationLabelPrefix+"k"] != "v" {
				t.Errorf("%q: pod %s lacks the policy's annotation", tc.shape, pod.Name)
			}
		}
		if counts[RolePrefill] != tc.prefill || counts[RoleDecode] != tc.decode || len(pods)-counts[RolePrefill]-counts[RoleDecode] != tc.others {
			t.Errorf("shapedFleet(64, %q, %v) roles %v; want %d prefill, %d decode, %d others", tc.shape, tc.fleet, counts, tc.prefill, tc.decode, tc.others)
		}
	}
	if _, err := (Policy{Fleet: FleetKindPD}).shapedFleet(64, "pd-x", "m"); err == nil {
		t.Error("shapedFleet accepted a malformed shape")
	}
}

func TestParseLoads(t *testing.T) {
	tests := []struct {
		in      string
		want    []float64
		wantErr bool
	}{
		{"0.5,0.8, 1.0", []float64{0.5, 0.8, 1}, false},
		{"0.8", []float64{0.8}, false},
		{"", nil, true},
		{"0", nil, true},
		{"-1", nil, true},
		{"NaN", nil, true},
		{"0.5,x", nil, true},
		{"11", nil, true},
	}
	for _, tc := range tests {
		got, err := parseLoads(tc.in)
		if (err != nil) != tc.wantErr || fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("parseLoads(%q) = %v, %v; want %v, error %v", tc.in, got, err, tc.want, tc.wantErr)
		}
	}
}

func FuzzParseLoads(f *testing.F) {
	for _, s := range []string{"0.5,0.8,1.0", "", "1e9", "0x1p-2", ",,", "Inf"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ls, err := parseLoads(s)
		if err != nil {
			return
		}
		for _, l := range ls {
			if !(l > 0 && l <= 10) {
				t.Fatalf("parseLoads(%q) accepted %v", s, l)
			}
		}
	})
}

// The capacity estimate is the cost model's arithmetic: halving every cost doubles it.
func TestCapacityPerGPU(t *testing.T) {
	p := costmodel.Default()
	c := CapacityPerGPU(p, 1000, 200)
	if !(c > 1 && c < 100) {
		t.Fatalf("capacity %v req/s per GPU is implausible for an 8B model on an H100", c)
	}
	fast := *p
	fast.Prefill.LinearMsPerToken /= 2
	fast.Prefill.QuadraticMsPerToken2 /= 2
	fast.Prefill.OverheadMs /= 2
	fast.Decode.BaseMs /= 2
	fast.Decode.PerSeqMs /= 2
	fast.Decode.PerKVTokenMs /= 2
	if got := CapacityPerGPU(&fast, 1000, 200); math.Abs(got/c-2) > 0.02 {
		t.Fatalf("halved costs: capacity ×%.3f, want ×2", got/c)
	}
	if CapacityPerGPU(p, 1000, 400) >= c {
		t.Fatal("longer outputs must lower the capacity")
	}
}

func TestComponentsOverheads(t *testing.T) {
	c := Components{PrefillEngineTTFT: 38, SidecarPrefillLeg: 41, SidecarHandoff: 22, ClientTTFTMean: 80}
	o := c.Overheads(time.Millisecond)
	if o.Hop != 1500*time.Microsecond || o.Route != 14*time.Millisecond || o.Step != time.Millisecond {
		t.Fatalf("got %+v, want hop 1.5ms, route 80-41-22-3 = 14ms, step 1ms", o)
	}
	// a stage measured below the engine's own time (noise) never yields a negative overhead
	if o := (Components{PrefillEngineTTFT: 40, SidecarPrefillLeg: 39, ClientTTFTMean: 10}).Overheads(0); o.Hop != 0 || o.Route != 0 {
		t.Fatalf("negative overheads not clamped: %+v", o)
	}
}

func TestScrapeIntoSumsLabelSets(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `# HELP x y
vllm:time_to_first_token_seconds_bucket{le="0.1"} 3
vllm:time_to_first_token_seconds_sum{model_name="m"} 0.25
vllm:time_to_first_token_seconds_count{model_name="m"} 5
pdgate_sidecar_prefill_duration_seconds_sum{engine="vllm",outcome="ok"} 1.5
pdgate_sidecar_prefill_duration_seconds_sum{engine="vllm",outcome="failed"} 0.5
pdgate_sidecar_prefill_duration_seconds_count{engine="vllm",outcome="ok"} 30
vllm:time_to_first_token_seconds_sum_other 99
`)
	}))
	defer srv.Close()
	out := map[string]float64{}
	err := scrapeInto(t.Context(), srv.URL, out, map[string]string{
		"vllm:time_to_first_token_seconds": "p:ttft", "pdgate_sidecar_prefill_duration_seconds": "s:pre"})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"p:ttft_sum": 0.25, "p:ttft_count": 5, "s:pre_sum": 2, "s:pre_count": 30}
	if fmt.Sprint(out) != fmt.Sprint(want) {
		t.Fatalf("got %v, want %v", out, want)
	}
}

func TestLoadLabRecordRejectsIncomplete(t *testing.T) {
	dir := t.TempDir()
	for name, body := range map[string]string{
		"no-topology": `{"workload":"azure-conv","requests":3,"summary":{"latencyMs":{"ttft":{"count":3,"p50":1}}}}`,
		"no-requests": `{"topology":"t.yaml","workload":"azure-conv","summary":{"latencyMs":{"ttft":{"count":3,"p50":1}}}}`,
		"no-ttft":     `{"topology":"t.yaml","workload":"azure-conv","requests":3}`,
		"not-json":    `{`,
	} {
		p := filepath.Join(dir, name+".json")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadLabRecord(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if _, err := LoadLabRecord(repoFile("config/bench/sim/lab-default-azure300.json")); err != nil {
		t.Fatalf("the committed record: %v", err)
	}
}

func TestSelectPolicies(t *testing.T) {
	tests := []struct {
		list    string
		names   []string
		configs []string
		err     string
	}{
		{"least-request,recommended", []string{"least-request", "recommended"}, []string{"config/bench/routing/least-request.yaml", "config/recommended.yaml"}, ""},
		{"pd-topology", []string{"pd-topology"}, []string{"config/bench/topology/pd-topology.yaml"}, ""},
		{"mine=/tmp/x.yaml, recommended", []string{"mine", "recommended"}, []string{"/tmp/x.yaml", "config/recommended.yaml"}, ""},
		{"no-such", nil, nil, `unknown policy "no-such"`},
		{"=x.yaml", nil, nil, "want NAME=FILE"},
		{"mine=", nil, nil, "want NAME=FILE"},
	}
	for _, tc := range tests {
		t.Run(tc.list, func(t *testing.T) {
			got, err := SelectPolicies(tc.list)
			if plugintest.WantErr(t, err, tc.err) {
				return
			}
			if len(got) != len(tc.names) {
				t.Fatalf("%d policies, want %d", len(got), len(tc.names))
			}
			for i, p := range got {
				if p.Name != tc.names[i] || p.Config != tc.configs[i] || p.Fleet != FleetKindPD {
					t.Fatalf("policy %d = %+v, want %s on %s", i, p, tc.names[i], tc.configs[i])
				}
			}
			if got := (Policy{Config: "/abs/c.yaml"}).configPath("/root"); got != "/abs/c.yaml" {
				t.Fatalf("absolute config joined to the root: %s", got)
			}
		})
	}
}
