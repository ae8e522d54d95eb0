package maxsaturationdetector

import (
	"context"
	"math"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// queueDetector reads mean waiting / threshold, and 1.0 for no endpoints (as GIE's detectors).
type queueDetector struct {
	name      string
	threshold float64
}

func (q queueDetector) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "queue-detector", Name: q.name}
}

func (q queueDetector) Saturation(_ context.Context, eps []fwkdl.Endpoint) float64 {
	if len(eps) == 0 {
		return 1
	}
	var s float64
	for _, ep := range eps {
		s += float64(ep.GetMetrics().WaitingQueueSize)
	}
	return s / float64(len(eps)) / q.threshold
}

type notADetector struct{}

func (notADetector) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "queue-scorer", Name: "scorer"}
}

func handleWith(plugins map[string]fwkplugin.Plugin) fwkplugin.Handle {
	h := fwkplugin.NewEppHandle(context.Background(), nil)
	for n, p := range plugins {
		h.AddPlugin(n, p)
	}
	return h
}

func build(t *testing.T, name, raw string, h fwkplugin.Handle) (*Detector, error) {
	t.Helper()
	p, err := Factory(name, []byte(raw), nil)
	if err != nil {
		return nil, err
	}
	d := p.(*Detector)
	h.AddPlugin(name, d)
	return d, d.ResolveReferences(h)
}

func TestParameters(t *testing.T) {
	tests := []struct{ name, raw, wantErr string }{
		{name: "children", raw: `{"detectors":["a","b"],"stages":{"a":["prefill"],"b":["decode","prefill"]}}`},
		{name: "no children", raw: ``, wantErr: "detectors: at least one child detector is required"},
		{name: "empty list", raw: `{"detectors":[]}`, wantErr: "at least one"},
		{name: "duplicate", raw: `{"detectors":["a","a"]}`, wantErr: `detectors[1]: "a" is listed twice`},
		{name: "empty name", raw: `{"detectors":[""]}`, wantErr: "detectors[0]: empty plugin name"},
		{name: "stage of a stranger", raw: `{"detectors":["a"],"stages":{"b":["prefill"]}}`, wantErr: `stages: "b" is not one of the detectors`},
		{name: "unknown stage", raw: `{"detectors":["a"],"stages":{"a":["encode"]}}`, wantErr: `stages.a: stage "encode" must be "prefill" or "decode"`},
		{name: "unknown field", raw: `{"detectors":["a"],"mode":"max"}`, wantErr: `unknown field "mode"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseParameters("combined", []byte(tt.raw))
			plugintest.WantErr(t, err, tt.wantErr, Type, `"combined"`)
		})
	}
}

func TestChildrenAreStartupErrors(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
		others             map[string]fwkplugin.Plugin
	}{
		{name: "resolved", raw: `{"detectors":["q"]}`, others: map[string]fwkplugin.Plugin{"q": queueDetector{"q", 1}}},
		{name: "missing", raw: `{"detectors":["q","gone"]}`, others: map[string]fwkplugin.Plugin{"q": queueDetector{"q", 1}},
			wantErr: `detectors[1]: no plugin named "gone"`},
		{name: "wrong type", raw: `{"detectors":["scorer"]}`, others: map[string]fwkplugin.Plugin{"scorer": notADetector{}},
			wantErr: `detectors[0]: plugin "scorer" (type queue-scorer) is not a saturation detector`},
		{name: "itself", raw: `{"detectors":["combined"]}`, wantErr: `detectors[0]: "combined" leads back to this detector`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := build(t, "combined", tt.raw, handleWith(tt.others))
			plugintest.WantErr(t, err, tt.wantErr, Type, `"combined"`)
		})
	}
	t.Run("cycle through another max detector", func(t *testing.T) {
		h := handleWith(nil)
		inner, err := Factory("inner", []byte(`{"detectors":["outer"]}`), nil)
		if err != nil {
			t.Fatal(err)
		}
		h.AddPlugin("inner", inner)
		_, err = build(t, "outer", `{"detectors":["inner"]}`, h)
		plugintest.WantErr(t, err, `detectors[0]: "inner" leads back to this detector`)
	})
}

func ep(role string, waiting int) fwkdl.Endpoint {
	m := fwkdl.NewMetrics()
	m.WaitingQueueSize = waiting
	return eptest.Data(eptest.Spec{Name: role, Role: role, Metrics: m})
}

func TestSaturation(t *testing.T) {
	children := map[string]fwkplugin.Plugin{"q2": queueDetector{"q2", 2}, "q10": queueDetector{"q10", 10}}
	pd := []fwkdl.Endpoint{ep("prefill", 3), ep("prefill", 3), ep("decode", 0)}
	tests := []struct {
		name, raw string
		eps       []fwkdl.Endpoint
		want      float64
		gauges    map[[2]string]float64 // (child, stage) → last value
	}{
		{name: "strict child scoped to prefill", raw: `{"detectors":["q2","q10"],"stages":{"q2":["prefill"]}}`, eps: pd, want: 1.5,
			gauges: map[[2]string]float64{{"q2", "prefill"}: 1.5, {"q10", "prefill"}: 0.3, {"q10", "decode"}: 0}},
		{name: "strict child scoped to decode", raw: `{"detectors":["q2","q10"],"stages":{"q2":["decode"]}}`, eps: pd, want: 0.3,
			gauges: map[[2]string]float64{{"q10", "prefill"}: 0.3, {"q2", "decode"}: 0}},
		{name: "no scopes: every child on every stage", raw: `{"detectors":["q2","q10"]}`, eps: pd, want: 1.5},
		{name: "a stage with no child in scope reads 0", raw: `{"detectors":["q2"],"stages":{"q2":["prefill"]}}`,
			eps: []fwkdl.Endpoint{ep("decode", 9)}, want: 0},
		{name: "unlabelled pods are the decode stage", raw: `{"detectors":["q2","q10"],"stages":{"q2":["prefill"]}}`,
			eps: []fwkdl.Endpoint{ep("", 3)}, want: 0.3},
		{name: "combined pods only: not partitioned, every child runs", raw: `{"detectors":["q2","q10"],"stages":{"q2":["prefill"],"q10":["decode"]}}`,
			eps: []fwkdl.Endpoint{ep("prefill-decode", 3)}, want: 1.5,
			gauges: map[[2]string]float64{{"q2", "effective"}: 1.5, {"q10", "effective"}: 0.3}},
		{name: "empty list: every child runs", raw: `{"detectors":["q2","q10"],"stages":{"q2":["prefill"]}}`, want: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d, err := build(t, "combined", tt.raw, handleWith(children))
			if err != nil {
				t.Fatal(err)
			}
			if got := d.Saturation(context.Background(), tt.eps); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("saturation %v, want %v", got, tt.want)
			}
			for k, want := range tt.gauges {
				if got := testutil.ToFloat64(d.gauge.WithLabelValues(k[0], k[1])); math.Abs(got-want) > 1e-9 {
					t.Errorf("%s{detector=%q,stage=%q} = %v, want %v", MetricName, k[0], k[1], got, want)
				}
			}
		})
	}
}
