package latencyobserver

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrconcurrency "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/concurrency"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/requestcontrol/requestdataproducer/inflightload"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/latency/internal/ttftpercentiles"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

var t0 = time.Date(2026, 9, 1, 12, 0, 0, 0, time.UTC)

// clock is a settable now, safe to read from the producer's tick while a test moves it.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock(at time.Time) *clock { return &clock{now: at} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Add moves the clock by d and returns the new time.
func (c *clock) Add(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	return c.now
}

func endpoint(name string, inflight int64) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Namespace: "default", Name: name,
		Attributes: map[string]fwkdl.Cloneable{attrconcurrency.InFlightLoadKey: &attrconcurrency.InFlightLoad{Requests: inflight}}})
}

func TestParameters(t *testing.T) {
	tests := []struct{ name, raw, wantErr string }{
		{name: "defaults"},
		{name: "llm-d's README example", raw: `{"intervalDuration":"1s","minRequests":10,"bucketDuration":"1m","bucketHistorySize":1000}`},
		{name: "zero interval", raw: `{"intervalDuration":"0s"}`, wantErr: "intervalDuration must be > 0"},
		{name: "negative minRequests", raw: `{"minRequests":-1}`, wantErr: "minRequests must be > 0, got -1"},
		{name: "maxRequests over windowSize", raw: `{"maxRequests":200,"windowSize":100}`, wantErr: "maxRequests (200) must be <= windowSize (100)"},
		{name: "percentiles out of order", raw: `{"lowPercentile":60}`, wantErr: "0 < low < typical < 100"},
		{name: "typical at 100", raw: `{"typicalPercentile":100}`, wantErr: "0 < low < typical < 100"},
		{name: "history of one", raw: `{"bucketHistorySize":1}`, wantErr: "bucketHistorySize must be >= 2"},
		{name: "unknown field", raw: `{"windowDuration":"1m"}`, wantErr: `unknown field "windowDuration"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseParameters("obs", []byte(tt.raw))
			plugintest.WantErr(t, err, tt.wantErr, Type, `"obs"`)
		})
	}
}

// serve runs one request through the producer's hooks: dispatched to ep now, first chunk
// after ttft (a whole body when streamed is false).
func serve(p *Producer, c *clock, ep fwksched.Endpoint, ttft time.Duration, streamed bool) {
	req := &fwksched.LLMRequest{}
	p.PreRequest(context.Background(), req, &fwksched.SchedulingResult{PrimaryProfileName: "default",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"default": {TargetEndpoints: []fwksched.Endpoint{ep}}}})
	c.Add(ttft)
	p.ResponseBody(context.Background(), req, &fwkrc.Response{EndOfStream: !streamed}, ep.GetMetadata())
	p.ResponseBody(context.Background(), req, &fwkrc.Response{EndOfStream: true}, ep.GetMetadata())
}

func newProducer(t *testing.T, raw string) (*Producer, *clock) {
	t.Helper()
	params, err := ParseParameters("obs", []byte(raw))
	if err != nil {
		t.Fatal(err)
	}
	c := newClock(t0)
	return New(context.Background(), "obs", params, c.Now), c
}

// published is what PrepareData puts on ep for the scorer.
func published(t *testing.T, p *Producer, ep fwksched.Endpoint) *ttftpercentiles.TTFTPercentiles {
	t.Helper()
	if err := p.PrepareRequestData(context.Background(), nil, []fwksched.Endpoint{ep}); err != nil {
		t.Fatal(err)
	}
	return ttftpercentiles.Read(ep, ttftpercentiles.DataKey("obs"))
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestSnapshot(t *testing.T) {
	p, c := newProducer(t, `{"minRequests":4,"maxRequests":10}`)
	// Ten streamed requests: TTFT i×100 ms dispatched at in-flight i (1..10).
	for i := 1; i <= 10; i++ {
		serve(p, c, endpoint("a", int64(i)), time.Duration(i)*100*time.Millisecond, true)
	}
	serve(p, c, endpoint("a", 99), 5*time.Second, false) // a whole body: discarded
	p.recompute(c.Now())
	m := published(t, p, endpoint("a", 0))
	want := ttftpercentiles.TTFTPercentiles{
		WindowFloorTTFT: 0.1, LowLoadTTFT: 0.3, TypicalLoadTTFT: 0.5,
		InflightAtLowLoad: 3, InflightAtTypicalLoad: 5, // nearest ranks P15..P35 = 2..4, P40..P60 = 4..6
		RecentRequestCount: 10, Observations: 10, CalibrationThreshold: 4,
	}
	if m == nil {
		t.Fatal("nothing published")
	}
	got := *m
	for _, f := range []struct {
		name      string
		got, want float64
	}{
		{"WindowFloorTTFT", got.WindowFloorTTFT, want.WindowFloorTTFT}, {"LowLoadTTFT", got.LowLoadTTFT, want.LowLoadTTFT},
		{"TypicalLoadTTFT", got.TypicalLoadTTFT, want.TypicalLoadTTFT}, {"InflightAtLowLoad", got.InflightAtLowLoad, want.InflightAtLowLoad},
		{"InflightAtTypicalLoad", got.InflightAtTypicalLoad, want.InflightAtTypicalLoad}, {"FloorTTFT", got.FloorTTFT, 0},
	} {
		if !near(f.got, f.want) {
			t.Errorf("%s = %v, want %v", f.name, f.got, f.want)
		}
	}
	if got.RecentRequestCount != 10 || got.Observations != 10 || got.CalibrationThreshold != 4 || !near(m.Floor(), 0.1) {
		t.Errorf("counts %+v, floor %v", got, m.Floor())
	}
	if other := published(t, p, endpoint("b", 0)); other != nil {
		t.Errorf("an endpoint never observed gets %+v", other)
	}
}

func TestWindowAndGates(t *testing.T) {
	tests := []struct {
		name, raw   string
		requests    int
		age         time.Duration // wait before recomputing
		recent      int
		observation int64
		floor       bool
	}{
		{name: "under minRequests: cold", raw: `{"minRequests":5}`, requests: 4, recent: 4, observation: 4},
		{name: "at minRequests: a floor", raw: `{"minRequests":5}`, requests: 5, recent: 5, observation: 5, floor: true},
		{name: "maxRequests caps the window", raw: `{"minRequests":2,"maxRequests":3}`, requests: 8, recent: 3, observation: 8, floor: true},
		{name: "old observations leave the window, the count stays", raw: `{"minRequests":2,"maxObservationAge":"10s"}`, requests: 4, age: time.Minute, recent: 0, observation: 4, floor: true},
		{name: "windowSize bounds the ring", raw: `{"minRequests":2,"maxRequests":2,"windowSize":2}`, requests: 6, recent: 2, observation: 6, floor: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, c := newProducer(t, tt.raw)
			for i := 0; i < tt.requests; i++ {
				serve(p, c, endpoint("a", 1), 50*time.Millisecond, true)
			}
			p.recompute(c.Add(tt.age))
			m := published(t, p, endpoint("a", 0))
			if m.RecentRequestCount != tt.recent || m.Observations != tt.observation || (m.Floor() > 0) != tt.floor {
				t.Fatalf("got recent %d, observations %d, floor %v; want %d, %d, floor %v", m.RecentRequestCount, m.Observations, m.Floor(), tt.recent, tt.observation, tt.floor)
			}
		})
	}
}

// The floor is the P10 of per-bucket P10s; a full history drops its largest entry, so a slow
// spell is forgotten before the fast ones.
func TestFloorHistory(t *testing.T) {
	p, c := newProducer(t, `{"minRequests":1,"bucketDuration":"1m","bucketHistorySize":2,"maxObservationAge":"10m"}`)
	for _, ttft := range []time.Duration{200 * time.Millisecond, 900 * time.Millisecond, 100 * time.Millisecond} {
		serve(p, c, endpoint("a", 0), ttft, true)
		p.recompute(c.Add(time.Minute))
	}
	if got := p.endpoints["default/a"].history; len(got) != 2 || !near(got[0], 0.2) || !near(got[1], 0.1) {
		t.Fatalf("history %v, want [0.2 0.1] (0.9 trimmed)", got)
	}
	if m := published(t, p, endpoint("a", 0)); !near(m.FloorTTFT, 0.1) || !near(m.Floor(), 0.1) {
		t.Fatalf("floor %v / %v, want 0.1", m.FloorTTFT, m.Floor())
	}
}

func TestTickStartsWithTheFirstRequest(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	params, err := ParseParameters("obs", []byte(`{"intervalDuration":"10ms","minRequests":1}`))
	if err != nil {
		t.Fatal(err)
	}
	p := New(ctx, "obs", params, time.Now)
	serve(p, newClock(time.Now()), endpoint("a", 0), 0, true)
	deadline := time.Now().Add(5 * time.Second)
	for published(t, p, endpoint("a", 0)) == nil {
		if time.Now().After(deadline) {
			t.Fatal("nothing published: the tick did not start without a dataLayer source")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Listed under dataLayer.sources, as llm-d requires, it loads: a polling source with no
// extractors. It also makes sure an inflight-load-producer runs.
func TestDataSourceAndInFlightProducer(t *testing.T) {
	p, _ := newProducer(t, ``)
	if data, err := p.Poll(context.Background(), nil); data != nil || err != nil {
		t.Fatalf("Poll = %v, %v", data, err)
	}
	if err := p.ValidateExtractor(nil); err == nil {
		t.Fatal("an extractor must be refused")
	}
	fwkplugin.Register(ttftpercentiles.InFlightProducerType, inflightload.InFlightLoadProducerFactory)
	tests := []struct {
		name, raw, wantErr string
		others             map[string]fwkplugin.Plugin
		wantAdded          bool
	}{
		{name: "added when missing", wantAdded: true},
		{name: "a configured one is used", others: map[string]fwkplugin.Plugin{"load": mustInFlight(t, "load")}},
		{name: "named", raw: `{"inFlightLoadProducerName":"load"}`, others: map[string]fwkplugin.Plugin{"load": mustInFlight(t, "load")}},
		{name: "named but missing", raw: `{"inFlightLoadProducerName":"load"}`, wantErr: `inFlightLoadProducerName: no plugin named "load"`},
		{name: "named, not a producer", raw: `{"inFlightLoadProducerName":"obs"}`, wantErr: `plugin "obs" (type latency-observer-producer-hub) does not produce InFlightLoadKey`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, _ := newProducer(t, tt.raw)
			h := fwkplugin.NewEppHandle(context.Background(), nil)
			h.AddPlugin("obs", p)
			for n, o := range tt.others {
				h.AddPlugin(n, o)
			}
			if plugintest.WantErr(t, p.ResolveReferences(h), tt.wantErr, Type, `"obs"`) {
				return
			}
			if added := h.Plugin(ttftpercentiles.InFlightProducerType) != nil; added != tt.wantAdded {
				t.Fatalf("inflight-load-producer added: %v, want %v", added, tt.wantAdded)
			}
		})
	}
}

func mustInFlight(t *testing.T, name string) fwkplugin.Plugin {
	t.Helper()
	p, err := inflightload.InFlightLoadProducerFactory(name, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
