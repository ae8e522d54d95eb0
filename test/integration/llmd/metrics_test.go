package llmd

import (
	"encoding/json"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
)

// counter reads a pdgate counter from controller-runtime's registry (what the EPP serves on
// /metrics).
func counter(t *testing.T, name string, labels map[string]string) float64 {
	t.Helper()
	families, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	next:
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if want, ok := labels[lp.GetName()]; ok && want != lp.GetValue() {
					continue next
				}
			}
			return counterOf(m)
		}
	}
	return 0
}

func counterOf(m *dto.Metric) float64 { return m.GetCounter().GetValue() }

func TestDecisionMetrics(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/e-p-d.yaml", []pod{
		{name: "encode-0", ip: "127.0.0.91", labels: map[string]string{role: "encode"}},
		{name: "prefill-0", ip: "127.0.0.92", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.93", labels: map[string]string{role: "decode"}},
	})
	body := func(model string, content any) string {
		b, _ := json.Marshal(map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": content}}})
		return string(b)
	}
	// The counters are process-wide: compare against their values before the requests, so the
	// test holds under -count=N too.
	decisions := map[string]string{"metrics-epd": "encode-prefill-decode", "metrics-pd": "prefill-decode", "metrics-d": "decode-only"}
	before := map[string]float64{}
	for model, decision := range decisions {
		before[model] = counter(t, "pdgate_disagg_decisions_total", map[string]string{"model_name": model, "decision_type": decision})
	}
	beforeED := counter(t, "pdgate_disagg_decisions_total", map[string]string{"model_name": "metrics-ed"})
	e.send(t, "/v1/chat/completions", nil, body("metrics-epd", imageContent("https://img.example/m.png")))
	e.send(t, "/v1/chat/completions", nil, body("metrics-pd", strings.Repeat("long text prompt ", 30)))
	e.send(t, "/v1/chat/completions", nil, body("metrics-d", "hi"))
	e.send(t, "/v1/chat/completions", nil, body("metrics-ed", []map[string]any{{"type": "image_url", "image_url": map[string]string{"url": "u"}}}))
	for model, decision := range decisions {
		if v := counter(t, "pdgate_disagg_decisions_total", map[string]string{"model_name": model, "decision_type": decision}) - before[model]; v != 1 {
			t.Errorf("%s %s grew by %v, want 1", model, decision, v)
		}
	}
	// An image alone is short (one placeholder run) but uncached: still above nonCachedTokens.
	if v := counter(t, "pdgate_disagg_decisions_total", map[string]string{"model_name": "metrics-ed"}) - beforeED; v != 1 {
		t.Errorf("metrics-ed decisions grew by %v, want 1", v)
	}
}
