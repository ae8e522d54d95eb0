package utilizationdetector

import (
	"context"
	"testing"
	"time"

	"github.com/go-logr/logr"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/flowcontrol/saturationdetector/utilization"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func metrics(waiting int, kv float64, age time.Duration) *fwkdl.Metrics {
	m := fwkdl.NewMetrics()
	m.WaitingQueueSize, m.KVCacheUsagePercent, m.UpdateTime = waiting, kv, time.Now().Add(-age)
	return m
}

func TestSaturationByPolicy(t *testing.T) {
	fresh := func(name string, waiting int) eptest.Spec {
		return eptest.Spec{Name: name, Metrics: metrics(waiting, 0, 0)}
	}
	stale := eptest.Spec{Name: "stale", Metrics: metrics(0, 0, time.Minute)}
	missing := eptest.Spec{Name: "missing", NoMetrics: true}
	tests := []struct {
		name              string
		eps               []eptest.Spec
		saturated, ignore float64
	}{
		{name: "empty list", saturated: 1, ignore: 1},
		{name: "all fresh", eps: []eptest.Spec{fresh("a", 5), fresh("b", 0)}, saturated: 0.5, ignore: 0.5},
		{name: "one stale", eps: []eptest.Spec{fresh("a", 5), stale}, saturated: 1, ignore: 1},
		{name: "one stale, one idle", eps: []eptest.Spec{fresh("a", 0), stale}, saturated: 0.5, ignore: 0},
		{name: "missing metrics count as stale", eps: []eptest.Spec{fresh("a", 10), missing}, saturated: 1.5, ignore: 2},
		{name: "all stale", eps: []eptest.Spec{stale, missing}, saturated: 1, ignore: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			checkPolicies(t, dataEndpoints(tt.eps), tt.saturated, tt.ignore, nil)
		})
	}
}

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
		want               Parameters
	}{
		{name: "defaults", want: DefaultParameters()},
		{name: "ignore", raw: `{"stalenessPolicy":"ignore","headroom":0.2}`,
			want: func() Parameters {
				p := DefaultParameters()
				p.StalenessPolicy, p.Headroom = PolicyIgnore, 0.2
				return p
			}()},
		{name: "GIE's four", raw: `{"queueDepthThreshold":7,"kvCacheUtilThreshold":1.0,"metricsStalenessThreshold":"1s","headroom":0}`,
			want: func() Parameters {
				p := DefaultParameters()
				p.QueueDepthThreshold, p.KVCacheUtilThreshold, p.MetricsStalenessThreshold.Duration = 7, 1, time.Second
				return p
			}()},
		{name: "unknown policy", raw: `{"stalenessPolicy":"open"}`, wantErr: `utilization-detector "d": invalid parameters: stalenessPolicy must be "saturated" or "ignore", got "open"`},
		{name: "empty policy", raw: `{"stalenessPolicy":""}`, wantErr: `stalenessPolicy must be`},
		{name: "GIE's rules, joined", raw: `{"queueDepthThreshold":0,"kvCacheUtilThreshold":1.5}`, wantErr: "queueDepthThreshold must be > 0, got 0\nkvCacheUtilThreshold must be in (0, 1], got 1.5"},
		{name: "staleness", raw: `{"metricsStalenessThreshold":"0s"}`, wantErr: "metricsStalenessThreshold must be > 0"},
		{name: "headroom", raw: `{"headroom":-1}`, wantErr: "headroom must be >= 0"},
		{name: "unknown field", raw: `{"inFlightLoadProducerName":"x"}`, wantErr: `unknown field "inFlightLoadProducerName"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseParameters("d", []byte(tt.raw))
			if plugintest.WantErr(t, err, tt.wantErr, Type, `"d"`) {
				return
			}
			if got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

// The default policy is GIE's detector: same type name, same saturation and the same
// Filter, so configurations written for GIE's behave the same.
func TestDefaultIsGIEsDetector(t *testing.T) {
	ours, err := Factory("", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	d := ours.(*Detector)
	if d.TypedName() != (fwkplugin.TypedName{Type: "utilization-detector", Name: "utilization-detector"}) {
		t.Fatalf("typed name %v", d.TypedName())
	}
	gie := utilization.NewDetector("utilization-detector", utilization.Config{QueueDepthThreshold: 5, KVCacheUtilThreshold: 0.8,
		MetricsStalenessThreshold: 200 * time.Millisecond}, logr.Discard())
	specs := []eptest.Spec{
		{Name: "busy", Metrics: metrics(9, 0.2, 0)},
		{Name: "full", Metrics: metrics(1, 0.95, 0)},
		{Name: "ok", Metrics: metrics(2, 0.5, 0)},
		{Name: "stale", Metrics: metrics(0, 0, time.Second)},
	}
	data := make([]fwkdl.Endpoint, len(specs))
	sched := make([]fwksched.Endpoint, len(specs))
	for i, s := range specs {
		data[i], sched[i] = eptest.Data(s), eptest.Scheduling(s)
	}
	if a, b := d.Saturation(context.Background(), data), gie.Saturation(context.Background(), data); a != b {
		t.Fatalf("saturation %v, GIE's %v", a, b)
	}
	if a, b := plugintest.Names(d.Filter(context.Background(), nil, nil, sched)), plugintest.Names(gie.Filter(context.Background(), nil, nil, sched)); a != b || a != "ok" {
		t.Fatalf("filter kept %s, GIE's %s", a, b)
	}
}

// TestUseClock: on bench sim's virtual clock, metrics scraped a moment ago on that clock are
// fresh (the wall clock calls them months old and the pool saturated), and the same formula
// and policies apply as on the wall clock.
func TestUseClock(t *testing.T) {
	at := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	spec := func(name string, waiting int, kv float64, age time.Duration) eptest.Spec {
		m := &fwkdl.Metrics{WaitingQueueSize: waiting, KVCacheUsagePercent: kv, UpdateTime: at.Add(-age)}
		return eptest.Spec{Name: name, Metrics: m}
	}
	tests := []struct {
		name              string
		eps               []eptest.Spec
		saturated, ignore float64
	}{
		{name: "fresh on the virtual clock", eps: []eptest.Spec{spec("a", 5, 0, 10*time.Millisecond), spec("b", 0, 0.4, 0)}, saturated: 0.75, ignore: 0.75},
		{name: "stale on the virtual clock", eps: []eptest.Spec{spec("a", 0, 0, 0), spec("old", 0, 0, time.Second)}, saturated: 0.5, ignore: 0},
		{name: "empty pool", saturated: 1, ignore: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			eps := dataEndpoints(tt.eps)
			checkPolicies(t, eps, tt.saturated, tt.ignore, func(policy string, d *Detector) {
				if len(eps) > 0 && policy == PolicySaturated {
					if got := d.Saturation(context.Background(), eps); got != 1 {
						t.Fatalf("wall clock: saturation %v, want 1 (every virtual-time scrape stale)", got)
					}
				}
				d.UseClock(func() time.Time { return at })
			})
		})
	}
}

// checkPolicies builds a detector under each staleness policy, lets setup adjust it (nil: no
// change), and checks its saturation of eps against that policy's expected value.
func checkPolicies(t *testing.T, eps []fwkdl.Endpoint, saturated, ignore float64, setup func(policy string, d *Detector)) {
	t.Helper()
	for policy, want := range map[string]float64{PolicySaturated: saturated, PolicyIgnore: ignore} {
		p := DefaultParameters()
		p.StalenessPolicy = policy
		d := New(context.Background(), "d", p)
		if setup != nil {
			setup(policy, d)
		}
		if got := d.Saturation(context.Background(), eps); got < want-1e-9 || got > want+1e-9 {
			t.Errorf("%s: saturation %v, want %v", policy, got, want)
		}
	}
}

// dataEndpoints builds the data-layer endpoints the detector reads from specs.
func dataEndpoints(specs []eptest.Spec) []fwkdl.Endpoint {
	eps := make([]fwkdl.Endpoint, len(specs))
	for i, s := range specs {
		eps[i] = eptest.Data(s)
	}
	return eps
}
