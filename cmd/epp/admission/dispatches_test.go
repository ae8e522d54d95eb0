package admission

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
)

// scraped is an endpoint of a role whose metrics (q waiting) were taken at t.
func scraped(name, role string, q int, t time.Time) fwkdl.Endpoint {
	e := fwkdl.NewEndpoint(&fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}, Port: "8000",
		Labels: map[string]string{"llm-d.ai/role": role}}, nil)
	e.UpdateMetrics(&fwkdl.Metrics{WaitingQueueSize: q, UpdateTime: t})
	return e
}

// picked is a scheduling result sending the prefill leg to prefill and the request to decode.
func picked(prefill, decode fwkdl.Endpoint) *fwksched.SchedulingResult {
	r := &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
		"decode": {TargetEndpoints: []fwksched.Endpoint{fwksched.NewEndpoint(decode.GetMetadata(), decode.GetMetrics(), nil)}}}}
	if prefill != nil {
		r.ProfileResults["prefill"] = &fwksched.ProfileRunResult{TargetEndpoints: []fwksched.Endpoint{fwksched.NewEndpoint(prefill.GetMetadata(), prefill.GetMetrics(), nil)}}
	}
	return r
}

func TestDispatchesRaisePrefillQueueUntilTheNextScrape(t *testing.T) {
	scrape := time.Unix(1000, 0)
	cases := []struct {
		name string
		// dispatches: offsets from the scrape at which a request went to prefill-0 / decode-0
		prefillAt, decodeAt []time.Duration
		wantPrefill         int // prefill-0's waiting queue as admission sees it (scraped: 2)
		wantDecode          int // decode-0's (scraped: 1)
	}{
		{name: "nothing dispatched", wantPrefill: 2, wantDecode: 1},
		{name: "dispatched after the scrape", prefillAt: []time.Duration{10 * time.Millisecond, 30 * time.Millisecond, 40 * time.Millisecond}, wantPrefill: 5, wantDecode: 1},
		{name: "dispatched long before the scrape: in it", prefillAt: []time.Duration{-4 * arrivalAllowance, -arrivalAllowance - time.Millisecond}, wantPrefill: 2, wantDecode: 1},
		{name: "dispatched just before the scrape: may not have arrived", prefillAt: []time.Duration{-arrivalAllowance / 2}, wantPrefill: 3, wantDecode: 1},
		{name: "decode pods are not corrected", prefillAt: []time.Duration{time.Millisecond}, decodeAt: []time.Duration{time.Millisecond, 2 * time.Millisecond}, wantPrefill: 3, wantDecode: 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p0, p1 := scraped("prefill-0", "prefill", 2, scrape), scraped("prefill-1", "prefill", 0, scrape)
			d0 := scraped("decode-0", "decode", 1, scrape)
			led := NewDispatches()
			for _, off := range tc.prefillAt {
				led.now = func() time.Time { return scrape.Add(off) }
				led.Dispatched("r", picked(p0, d0))
			}
			for _, off := range tc.decodeAt {
				led.now = func() time.Time { return scrape.Add(off) }
				led.Dispatched("r", picked(nil, d0))
			}
			seen := led.Candidates(poolOf{p0, p1, d0}).Locate(context.Background(), nil)
			got := map[string]int{}
			for _, e := range seen {
				got[e.GetMetadata().NamespacedName.Name] = e.GetMetrics().WaitingQueueSize
			}
			// Dispatches to prefill-0 count once per prefill leg; prefill-1 got none.
			if got["prefill-0"] != tc.wantPrefill || got["prefill-1"] != 0 || got["decode-0"] != tc.wantDecode {
				t.Fatalf("queues seen %v, want prefill-0 %d, prefill-1 0, decode-0 %d", got, tc.wantPrefill, tc.wantDecode)
			}
			if p0.GetMetrics().WaitingQueueSize != 2 {
				t.Fatal("the datastore's metrics must not change")
			}
		})
	}
}

// A prefill leg reported returned (the prefill-release callback) is no longer counted as
// queued on its pod, without waiting for the next scrape; only once returns are tracked.
func TestReturnedLegsLeaveThePrefillQueue(t *testing.T) {
	scrape := time.Unix(1000, 0)
	cases := []struct {
		name     string
		untraced bool
		returned []string
		want     int // prefill-0's waiting queue as seen: scraped 2, legs a, b, c since
	}{
		{name: "none returned", want: 5},
		{name: "one returned", returned: []string{"b"}, want: 4},
		{name: "all returned", returned: []string{"a", "b", "c"}, want: 2},
		{name: "a second report of the same leg", returned: []string{"b", "b"}, want: 4},
		{name: "an unknown request", returned: []string{"z"}, want: 5},
		{name: "returns not tracked", untraced: true, returned: []string{"a", "b"}, want: 5},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p0, d0 := scraped("prefill-0", "prefill", 2, scrape), scraped("decode-0", "decode", 0, scrape)
			led := NewDispatches()
			if !tc.untraced {
				led.TrackReturns()
			}
			for i, id := range []string{"a", "b", "c"} {
				led.now = func() time.Time { return scrape.Add(time.Duration(10*i+10) * time.Millisecond) }
				led.Dispatched(id, picked(p0, d0))
			}
			for _, id := range tc.returned {
				led.PrefillReturned(id)
			}
			if got := led.Seen(p0.GetMetadata(), p0.GetMetrics()).WaitingQueueSize; got != tc.want {
				t.Fatalf("prefill-0 seen with %d waiting, want %d", got, tc.want)
			}
		})
	}
}

// A leg whose return is never reported leaves the ledger with the horizon.
func TestUnreturnedLegsExpire(t *testing.T) {
	start := time.Unix(1000, 0)
	p, d := scraped("p", "prefill", 0, start), scraped("d", "decode", 0, start)
	led := NewDispatches()
	led.TrackReturns()
	led.now = func() time.Time { return start }
	led.Dispatched("lost", picked(p, d))
	led.now = func() time.Time { return start.Add(2 * dispatchHorizon) }
	led.Dispatched("later", picked(p, d))
	if _, ok := led.legs["lost"]; ok || len(led.legs) != 1 {
		t.Fatalf("legs %v, want only the later request's", led.legs)
	}
}

// poolOf is a pool.
type poolOf []fwkdl.Endpoint

func (f poolOf) Locate(context.Context, map[string]any) []fwkdl.Endpoint { return f }

// Under a burst between two scrapes the stage-aware detector, reading the candidates through
// the ledger, reaches saturation from the EPP's own dispatches; without it, it still reads the
// last scrape.
func TestDispatchesShedWithinOneScrapeInterval(t *testing.T) {
	scrape := time.Unix(1000, 0)
	p0, d0 := scraped("prefill-0", "prefill", 4, scrape), scraped("decode-0", "decode", 0, scrape)
	led := NewDispatches()
	det := StageAware(queueDetector{})
	pool := poolOf{p0, d0}
	for i := range 6 {
		led.now = func() time.Time { return scrape.Add(time.Duration(i+1) * time.Millisecond) }
		led.Dispatched("r", picked(p0, d0))
	}
	if got := det.Saturation(context.Background(), led.Candidates(pool).Locate(context.Background(), nil)); got < 0.99 { // (4+6)/10
		t.Fatalf("with the ledger: saturation %v, want 1.0", got)
	}
	if got := det.Saturation(context.Background(), pool); got > 0.41 {
		t.Fatalf("without: saturation %v, want 0.4 (the scrape)", got)
	}
}

func TestDispatchesForgetOldAndGoneEndpoints(t *testing.T) {
	start := time.Unix(1000, 0)
	led := NewDispatches()
	led.now = func() time.Time { return start }
	led.Dispatched("r", picked(scraped("gone", "prefill", 0, start), scraped("d", "decode", 0, start)))
	led.now = func() time.Time { return start.Add(2 * dispatchHorizon) }
	led.Dispatched("r", picked(scraped("p", "prefill", 0, start), scraped("d", "decode", 0, start)))
	if len(led.byPod) != 1 || len(led.byPod[podKey{name: types.NamespacedName{Namespace: "ns", Name: "p"}, port: "8000"}]) != 1 {
		t.Fatalf("ledger %v, want only p's dispatch (decode picks are not recorded, gone's is too old)", led.byPod)
	}
}

// Open reservations go, one at a time, to the prefill pod that looks emptiest; Settle ends
// them.
func TestReservationsFillTheEmptiestPrefillPod(t *testing.T) {
	scrape := time.Unix(1000, 0)
	cases := []struct {
		name      string
		reserve   int
		settle    int
		want      map[string]int // waiting as seen; scraped: p0 2, p1 0, d0 0
		unchanged bool
	}{
		{name: "none", want: map[string]int{"prefill-0": 2, "prefill-1": 0, "decode-0": 0}, unchanged: true},
		{name: "one", reserve: 1, want: map[string]int{"prefill-0": 2, "prefill-1": 1, "decode-0": 0}},
		{name: "three", reserve: 3, want: map[string]int{"prefill-0": 3, "prefill-1": 2, "decode-0": 0}},
		{name: "three, two settled", reserve: 3, settle: 2, want: map[string]int{"prefill-0": 2, "prefill-1": 1, "decode-0": 0}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			pool := poolOf{scraped("prefill-0", "prefill", 2, scrape), scraped("prefill-1", "prefill", 0, scrape), scraped("decode-0", "decode", 0, scrape)}
			led := NewDispatchesAt(func() time.Time { return scrape })
			for i := range tc.reserve {
				led.reserve(fmt.Sprint("r", i))
			}
			for i := range tc.settle {
				led.Settle(fmt.Sprint("r", i))
			}
			seen := led.Candidates(pool).Locate(context.Background(), nil)
			got := map[string]int{}
			for _, e := range seen {
				got[e.GetMetadata().NamespacedName.Name] = e.GetMetrics().WaitingQueueSize
			}
			if !maps.Equal(got, tc.want) {
				t.Fatalf("seen %v, want %v", got, tc.want)
			}
			if tc.unchanged && &seen[0] != &pool[0] {
				t.Fatal("nothing to add: the pool's own slice must be returned")
			}
		})
	}
}

// Sheddable requests admitted concurrently each see the reservations of those admitted before
// them: the legacy check lets exactly as many through as the prefill tier has room for.
func TestConcurrentAdmissionsSeeEachOthersReservations(t *testing.T) {
	for _, tc := range []struct {
		name         string
		reservations bool
		want         int
	}{
		{name: "with reservations", reservations: true, want: 10}, // queueDetector saturates at 10 waiting
		{name: "without", reservations: false, want: 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Now()
			pool := poolOf{scraped("prefill-0", "prefill", 0, now), scraped("decode-0", "decode", 0, now)}
			led := NewDispatches()
			candidates := led.Candidates(pool)
			c := WithReasons(requestcontrol.NewLegacyAdmissionController(StageAware(queueDetector{}), candidates), candidates)
			if tc.reservations {
				c = c.WithReservations(led)
			}
			var wg sync.WaitGroup
			var admitted atomic.Int32
			for i := range 30 {
				wg.Go(func() {
					req := &fwksched.LLMRequest{RequestId: fmt.Sprint("r", i)}
					if c.Admit(context.Background(), &handlers.RequestContext{SchedulingRequest: req, Request: &handlers.Request{}}, -1) == nil {
						admitted.Add(1)
					}
				})
			}
			wg.Wait()
			if got := int(admitted.Load()); got != tc.want {
				t.Fatalf("admitted %d of 30, want %d", got, tc.want)
			}
		})
	}
}

// A pod whose metrics stopped refreshing keeps at most maxDispatchesPerPod entries, and the
// count is a binary search over them.
func TestDispatchesPerPodBound(t *testing.T) {
	start := time.Unix(1000, 0)
	p0 := scraped("prefill-0", "prefill", 0, start)
	led := NewDispatchesAt(func() time.Time { return start.Add(time.Millisecond) })
	for range 3 * maxDispatchesPerPod {
		led.Dispatched("r", picked(p0, scraped("decode-0", "decode", 0, start)))
	}
	seen := led.Candidates(poolOf{p0}).Locate(context.Background(), nil)
	if got := seen[0].GetMetrics().WaitingQueueSize; got != maxDispatchesPerPod {
		t.Fatalf("waiting seen %d, want the bound %d", got, maxDispatchesPerPod)
	}
}

// Within one scrape interval every request sees the same predicted metrics, made once; a new
// dispatch or a new scrape makes them anew. A prediction allocates only the request's slice and
// the endpoint wrapper, not a copy of the metrics per prefill pod.
func TestPredictionReusedWithinAScrape(t *testing.T) {
	scrape := time.Unix(1000, 0)
	p0, d0 := scraped("prefill-0", "prefill", 2, scrape), scraped("decode-0", "decode", 1, scrape)
	led := NewDispatches()
	led.now = func() time.Time { return scrape.Add(time.Millisecond) }
	led.Dispatched("r", picked(p0, d0))
	pool := led.Candidates(poolOf{p0, d0})
	waiting := func() (*fwkdl.Metrics, int) {
		m := pool.Locate(context.Background(), nil)[0].GetMetrics()
		return m, m.WaitingQueueSize
	}
	first, q := waiting()
	if again, _ := waiting(); again != first || q != 3 {
		t.Fatalf("second request: metrics %p (first %p), waiting %d; want the same copy with 3 waiting", again, first, q)
	}
	led.Dispatched("r", picked(p0, d0))
	if next, q := waiting(); next == first || q != 4 {
		t.Fatalf("after another dispatch: waiting %d from the old copy %v; want a new copy with 4", q, next == first)
	}
	p0.UpdateMetrics(&fwkdl.Metrics{WaitingQueueSize: 4, UpdateTime: scrape.Add(time.Second)})
	if _, q := waiting(); q != 4 {
		t.Fatalf("after a scrape that shows both legs: waiting %d, want 4", q)
	}
	led.Dispatched("r", picked(p0, d0))
	led.now = func() time.Time { return scrape.Add(time.Second + time.Millisecond) }
	led.Dispatched("r", picked(p0, d0))
	eps := poolOf{p0, d0}.Locate(context.Background(), nil)
	if n := testing.AllocsPerRun(100, func() { _ = led.predict(eps) }); n > 2 {
		t.Fatalf("%v allocations per prediction, want at most 2 (the slice and the wrappers)", n)
	}
}

// A prediction copies each changed prefill pod's metrics once, sharing the scrape's model maps
// (never changed), and otherwise costs the candidate slice and the wrappers.
func TestPredictionAllocations(t *testing.T) {
	scrape := time.Unix(1000, 0)
	led := NewDispatches()
	led.now = func() time.Time { return scrape.Add(time.Millisecond) }
	var pool poolOf
	for i := range 4 {
		p := scraped(fmt.Sprintf("prefill-%d", i), "prefill", 1, scrape)
		p.UpdateMetrics(&fwkdl.Metrics{WaitingQueueSize: 1, UpdateTime: scrape, ActiveModels: map[string]int{"m": 1}, WaitingModels: map[string]int{"m": 1}})
		pool = append(pool, p)
		led.Dispatched("r", picked(p, scraped("decode-0", "decode", 0, scrape)))
	}
	eps := pool.Locate(context.Background(), nil)
	seen := led.predict(eps)
	for i, e := range seen {
		m, scraped := e.GetMetrics(), eps[i].GetMetrics()
		if m.WaitingQueueSize != 2 || m == scraped || !maps.Equal(m.ActiveModels, scraped.ActiveModels) || !maps.Equal(m.WaitingModels, scraped.WaitingModels) {
			t.Fatalf("pod %d seen with %+v, want a copy of %+v with 2 waiting", i, m, scraped)
		}
	}
	if scraped := eps[0].GetMetrics(); scraped.WaitingQueueSize != 1 {
		t.Fatal("the datastore's metrics must not change")
	}
	want := 2 + len(eps) // the slice, the wrappers, and per pod its metrics copy
	if got := testing.AllocsPerRun(50, func() {
		clear(led.predicted) // every pod's copy made anew, as after a scrape
		_ = led.predict(eps)
	}); got > float64(want) {
		t.Fatalf("%v allocations per prediction of %d changed pods, want at most %d", got, len(eps), want)
	}
}
