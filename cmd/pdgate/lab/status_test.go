package lab

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	in := `# HELP vllm:num_requests_running x
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m"} 3
vllm:num_requests_running{model_name="n",x="a b}"} 2
vllm:kv_cache_usage_perc{model_name="m"} 0.25 1700000000
vllm:request_success_total{finished_reason="stop"} 7
vllm:request_success_total{finished_reason="length"} 5
plain 1e3
`
	m, err := ParseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{"vllm:num_requests_running": 5, "vllm:kv_cache_usage_perc": 0.25, "vllm:request_success_total": 12, "plain": 1000}
	for k, v := range want {
		if m[k] != v {
			t.Errorf("%s = %v, want %v", k, m[k], v)
		}
	}
	for _, bad := range []string{"x{a=\"1\" 3\n", "x\n", "x abc\n"} {
		if _, err := ParseMetrics(strings.NewReader(bad)); err == nil {
			t.Errorf("ParseMetrics(%q): want an error", bad)
		}
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add("a{b=\"c\"} 1\n# x\nd 2 3\n")
	f.Fuzz(func(t *testing.T, s string) { _, _ = ParseMetrics(strings.NewReader(s)) })
}

func TestRenderStatus(t *testing.T) {
	var b bytes.Buffer
	RenderStatus(&b, []PodStatus{
		{Pod: "p-0", Role: RolePrefill, Endpoint: "127.0.0.1:8000", InFlight: 1, Queue: 2, KVUse: 0.5, Served: 9},
		{Pod: "d-0", Role: RoleDecode, Endpoint: "127.0.0.2:8001", Served: 4},
		{Pod: "x-0", Role: RoleDecode, Err: "connection refused"},
	})
	out := b.String()
	for _, w := range []string{"PREFILL LEGS", "50.0%", "connection refused"} {
		if !strings.Contains(out, w) {
			t.Errorf("status table lacks %q:\n%s", w, out)
		}
	}
	lines := strings.Split(out, "\n")
	if f := strings.Fields(lines[1]); f[6] != "9" || f[7] != "-" {
		t.Errorf("prefill row %q", lines[1])
	}
	if f := strings.Fields(lines[2]); f[6] != "-" || f[7] != "4" {
		t.Errorf("decode row %q", lines[2])
	}
}

func TestLastTraces(t *testing.T) {
	p := filepath.Join(t.TempDir(), "epp.log")
	var b strings.Builder
	for i := 0; i < 5; i++ {
		b.WriteString(`{"msg":"Decision trace","n":` + string(rune('0'+i)) + "}\n{\"msg\":\"other\"}\n")
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := LastTraces(p, 2)
	if err != nil || len(got) != 2 || !strings.Contains(got[0], `"n":3`) || !strings.Contains(got[1], `"n":4`) {
		t.Fatalf("got %q, %v", got, err)
	}
	if _, err := LastTraces(filepath.Join(t.TempDir(), "none.log"), 2); err == nil || !strings.Contains(err.Error(), "no running lab") {
		t.Fatalf("got %v", err)
	}
}

func TestFormatTrace(t *testing.T) {
	line := `{"msg":"Decision trace","x-request-id":"r1","trace":{"stages":[{"stage":"prefill","ran":false}]}}`
	got := FormatTrace(line)
	if !strings.HasPrefix(got, "request r1:\n  {") || !strings.Contains(got, `"stage": "prefill"`) {
		t.Fatalf("got %q", got)
	}
	if FormatTrace("not json") != "not json" {
		t.Fatal("non-JSON lines pass through")
	}
}
