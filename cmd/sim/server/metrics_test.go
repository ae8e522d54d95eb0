package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	giemetrics "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/extractor/metrics"
)

func scrape(t *testing.T, in *Instance) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get("http://" + in.Addr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

func histSum(t *testing.T, in *Instance, name string) float64 {
	t.Helper()
	f, ok := scrape(t, in)[name]
	if !ok || len(f.GetMetric()) == 0 {
		t.Fatalf("no %s", name)
	}
	return f.GetMetric()[0].GetHistogram().GetSampleSum()
}

// GIE's own core-metrics-extractor reads the exposition of each dialect.
func TestMetricsParsedByGIEExtractor(t *testing.T) {
	clk := newPump(t)
	tests := []struct{ dialect, engine string }{
		{DialectVLLM, "vllm"}, {DialectSGLang, "sglang"}, {DialectTRTLLM, "trtllm-serve"},
	}
	plugin, err := giemetrics.CoreMetricsExtractorFactory("ext", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	ext := plugin.(*giemetrics.Extractor)
	for _, tc := range tests {
		in := startSim(t, clk, Options{Dialect: tc.dialect, Role: RoleCombined, KVCapacityTokens: 8000})
		for i := 0; i < 3; i++ {
			if r := post(t, "http://"+in.Addr()+"/v1/chat/completions", chat(strings.Repeat("metrics ", 50+i), 20, nil), nil); r.status != 200 {
				t.Fatalf("%s: %d", tc.dialect, r.status)
			}
		}
		ep := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{Labels: map[string]string{giemetrics.DefaultEngineTypeLabelKey: tc.engine}}, fwkdl.NewMetrics())
		if err := ext.Extract(context.Background(), scrape(t, in), ep); err != nil {
			t.Fatalf("%s: GIE extractor: %v", tc.dialect, err)
		}
		m := ep.GetMetrics()
		if m.CacheBlockSize != 16 || m.CacheNumBlocks != 500 || m.WaitingQueueSize != 0 || m.RunningRequestsSize != 0 || m.UpdateTime.IsZero() {
			t.Errorf("%s: extracted %+v", tc.dialect, m)
		}
		fams := scrape(t, in)
		n := dialectMetrics[tc.dialect]
		for _, name := range []string{n.prefillTime, n.genThroughput, n.success, "pdgate_sim_running_requests_drain_rate_1m"} {
			f, ok := fams[name]
			if !ok {
				t.Errorf("%s: %s missing", tc.dialect, name)
				continue
			}
			mm := f.GetMetric()[0]
			v := mm.GetGauge().GetValue() + mm.GetCounter().GetValue() + float64(mm.GetHistogram().GetSampleCount())
			if v <= 0 {
				t.Errorf("%s: %s is %v after 3 requests", tc.dialect, name, v)
			}
		}
	}
}
