package latencyobservation

import (
	"context"
	"encoding/json"
	"math"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrconcurrency "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/concurrency"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/latency/internal/ttftpercentiles"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// trusted is a calibrated endpoint: floor 0.1 s, B = (2, 0.2 s), C = (6, 0.6 s).
func trusted() *ttftpercentiles.TTFTPercentiles {
	return &ttftpercentiles.TTFTPercentiles{FloorTTFT: 0.1, WindowFloorTTFT: 0.1, LowLoadTTFT: 0.2, TypicalLoadTTFT: 0.6,
		InflightAtLowLoad: 2, InflightAtTypicalLoad: 6, RecentRequestCount: 20, Observations: 20, CalibrationThreshold: 10}
}

func with(f func(*ttftpercentiles.TTFTPercentiles)) *ttftpercentiles.TTFTPercentiles {
	m := trusted()
	f(m)
	return m
}

func endpoint(name string, m *ttftpercentiles.TTFTPercentiles, inflight int64) fwksched.Endpoint {
	attrs := map[string]fwkdl.Cloneable{}
	if m != nil {
		attrs[ttftpercentiles.DataKey(ttftpercentiles.ProducerType)] = m
	}
	if inflight >= 0 {
		attrs[attrconcurrency.InFlightLoadKey] = &attrconcurrency.InFlightLoad{Requests: inflight}
	}
	return eptest.Scheduling(eptest.Spec{Namespace: "default", Name: name, Attributes: attrs})
}

func TestParameters(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
		want               Parameters
	}{
		{name: "defaults", want: Parameters{ExplorationRate: 0.1, MinInflightGap: 2}},
		{name: "explicit zero exploration is kept", raw: `{"explorationRate":0,"roundTTFTStep":0.01}`, want: Parameters{MinInflightGap: 2, RoundTTFTStep: 0.01}},
		{name: "names", raw: `{"ttftPercentilesProducerName":"obs","inFlightLoadProducerName":"load"}`,
			want: Parameters{ExplorationRate: 0.1, MinInflightGap: 2, TTFTPercentilesProducerName: "obs", InFlightLoadProducerName: "load"}},
		{name: "exploration above 1", raw: `{"explorationRate":1.5}`, wantErr: "explorationRate must be in [0, 1], got 1.5"},
		{name: "zero gap", raw: `{"minInflightGap":0}`, wantErr: "minInflightGap must be > 0"},
		{name: "negative step", raw: `{"roundTTFTStep":-0.1}`, wantErr: "roundTTFTStep must be >= 0"},
		{name: "unknown field", raw: `{"maxTTFT":3}`, wantErr: `unknown field "maxTTFT"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Factory("ttft", []byte(tt.raw), nil)
			if !plugintest.WantErr(t, err, tt.wantErr, Type, `"ttft"`) && s.(*Scorer).params != tt.want {
				t.Fatalf("got %+v, want %+v", s.(*Scorer).params, tt.want)
			}
		})
	}
}

func TestPrediction(t *testing.T) {
	s, err := Factory("ttft", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	sc := s.(*Scorer)
	tests := []struct {
		name       string
		m          *ttftpercentiles.TTFTPercentiles
		inflight   int64 // -1: unreadable
		pred       float64
		cold, trus bool
	}{
		{name: "no snapshot: cold", m: nil, inflight: 0, cold: true},
		{name: "under the calibration threshold: cold", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.Observations = 9 }), inflight: 0, cold: true},
		{name: "idle: the floor", m: trusted(), inflight: 0, pred: 0.1, trus: true},
		{name: "A→B below the low anchor", m: trusted(), inflight: 1, pred: 0.15, trus: true},
		{name: "B→C", m: trusted(), inflight: 4, pred: 0.4, trus: true},
		{name: "B→C extended past C", m: trusted(), inflight: 8, pred: 0.8, trus: true},
		{name: "anchors too close: A→C", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.InflightAtLowLoad = 5 }), inflight: 3, pred: 0.35, trus: true},
		{name: "low under the floor: A→C", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.LowLoadTTFT = 0.05 }), inflight: 3, pred: 0.35, trus: true},
		{name: "window floor before the history", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.FloorTTFT = 0 }), inflight: 0, pred: 0.1, trus: true},
		{name: "few recent requests: seed at the floor", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.RecentRequestCount = 3 }), inflight: 5, pred: 0.1},
		{name: "no in-flight anchor: seed", m: with(func(m *ttftpercentiles.TTFTPercentiles) { m.InflightAtTypicalLoad = 0 }), inflight: 5, pred: 0.1},
		{name: "unreadable in-flight: untrusted", m: trusted(), inflight: -1, pred: 0.1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := sc.predict(endpoint("e", tt.m, tt.inflight))
			if c.cold != tt.cold || c.calibrated != tt.trus || math.Abs(c.pred-tt.pred) > 1e-9 {
				t.Fatalf("got pred %v cold %v calibrated %v; want %v, %v, %v", c.pred, c.cold, c.calibrated, tt.pred, tt.cold, tt.trus)
			}
		})
	}
}

func TestScore(t *testing.T) {
	seed := func(floor float64) *ttftpercentiles.TTFTPercentiles {
		return with(func(m *ttftpercentiles.TTFTPercentiles) { m.FloorTTFT, m.RecentRequestCount = floor, 0 })
	}
	type ep struct {
		m        *ttftpercentiles.TTFTPercentiles
		inflight int64
	}
	tests := []struct {
		name string
		raw  string
		eps  []ep
		want []float64
	}{
		{name: "all cold: all 1", eps: []ep{{nil, 0}, {nil, 3}}, want: []float64{1, 1}},
		{name: "lowest prediction wins", eps: []ep{{trusted(), 0}, {trusted(), 4}, {trusted(), 8}}, want: []float64{1, 4.0 / 7, 0}},
		{name: "seeds only: no exploration, cold seeded at the best", eps: []ep{{seed(0.1), 0}, {seed(0.3), 0}, {nil, 0}}, want: []float64{1, 0, 1}},
		{name: "a calibrated endpoint: under-observed suppressed at rate 0", raw: `{"explorationRate":0}`,
			eps: []ep{{trusted(), 4}, {seed(0.1), 0}, {nil, 0}}, want: []float64{1, 0, 0}},
		{name: "a calibrated endpoint: under-observed probed at rate 1", raw: `{"explorationRate":1}`,
			eps: []ep{{trusted(), 4}, {trusted(), 0}, {nil, 0}}, want: []float64{0, 1, 1}},
		{name: "rounding makes near-equal predictions tie", raw: `{"roundTTFTStep":0.1}`,
			eps: []ep{{trusted(), 0}, {with(func(m *ttftpercentiles.TTFTPercentiles) { m.FloorTTFT = 0.12 }), 0}}, want: []float64{1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Factory("ttft", []byte(tt.raw), nil)
			if err != nil {
				t.Fatal(err)
			}
			eps := make([]fwksched.Endpoint, len(tt.eps))
			for i, e := range tt.eps {
				eps[i] = endpoint(string(rune('a'+i)), e.m, e.inflight)
			}
			scores := s.(*Scorer).Score(context.Background(), nil, nil, eps)
			for i, want := range tt.want {
				if got := scores[eps[i]]; math.Abs(got-want) > 1e-9 {
					t.Errorf("endpoint %d: score %v, want %v", i, got, want)
				}
			}
		})
	}
}

type other struct{ name string }

func (o other) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "queue-scorer", Name: o.name}
}

func TestResolveReferences(t *testing.T) {
	for typ, build := range map[string]func(string) fwkplugin.Plugin{
		ttftpercentiles.InFlightProducerType: func(n string) fwkplugin.Plugin { return inFlight{n} },
		ttftpercentiles.ProducerType:         func(n string) fwkplugin.Plugin { return producer{n} },
	} {
		fwkplugin.Register(typ, func(name string, _ json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
			return build(name), nil
		})
	}
	tests := []struct {
		name, raw, wantErr, wantKey string
		others                      []fwkplugin.Plugin
	}{
		{name: "auto-created", wantKey: "TTFTPercentilesDataKey/latency-observer-producer-hub"},
		{name: "the only one", others: []fwkplugin.Plugin{producer{"obs"}}, wantKey: "TTFTPercentilesDataKey/obs"},
		{name: "named", raw: `{"ttftPercentilesProducerName":"b"}`, others: []fwkplugin.Plugin{producer{"a"}, producer{"b"}}, wantKey: "TTFTPercentilesDataKey/b"},
		{name: "two, unnamed", others: []fwkplugin.Plugin{producer{"a"}, producer{"b"}}, wantErr: "2 latency-observer-producer-hub plugins are configured ([a b])"},
		{name: "named, missing", raw: `{"ttftPercentilesProducerName":"obs"}`, wantErr: `ttftPercentilesProducerName: no plugin named "obs"`},
		{name: "named, wrong type", raw: `{"ttftPercentilesProducerName":"q"}`, others: []fwkplugin.Plugin{other{"q"}},
			wantErr: `plugin "q" is a queue-scorer, not a latency-observer-producer-hub`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Factory("ttft", []byte(tt.raw), nil)
			if err != nil {
				t.Fatal(err)
			}
			h := fwkplugin.NewEppHandle(context.Background(), nil)
			for _, o := range tt.others {
				h.AddPlugin(o.TypedName().Name, o)
			}
			if plugintest.WantErr(t, s.(*Scorer).ResolveReferences(h), tt.wantErr, Type, `"ttft"`) {
				return
			}
			if got := s.(*Scorer).dataKey; got != tt.wantKey {
				t.Fatalf("reads %q, want %q", got, tt.wantKey)
			}
			if h.Plugin(ttftpercentiles.InFlightProducerType) == nil {
				t.Fatal("no inflight-load-producer added")
			}
		})
	}
}

type producer struct{ name string }

func (p producer) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: ttftpercentiles.ProducerType, Name: p.name}
}

// inFlight stands in for GIE's inflight-load-producer: it produces InFlightLoadKey.
type inFlight struct{ name string }

func (p inFlight) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: ttftpercentiles.InFlightProducerType, Name: p.name}
}

func (inFlight) Produces() map[string]any {
	return map[string]any{attrconcurrency.InFlightLoadKey: attrconcurrency.InFlightLoad{}}
}
