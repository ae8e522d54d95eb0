package forecastadmitter

import (
	"context"
	"net/http"
	"testing"
	"time"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// TestPlacementCheck: once the scheduler picked, a refusable request whose pick misses the
// objective is answered 429; the leases it reads are the ledger's less its own charges.
func TestPlacementCheck(t *testing.T) {
	p, d := ep("p", "prefill"), ep("d", "decode")
	// the same decode pod scraped with two requests waiting for its next step (or for their KV
	// to arrive), as an engine at a modest load often is
	waiting := eptest.Scheduling(eptest.Spec{Name: "d", Namespace: "ns", Role: "decode",
		Metrics: &fwkdl.Metrics{RunningRequestsSize: 3, WaitingQueueSize: 2}})
	result := func(prefill, stepping bool) *fwksched.SchedulingResult {
		dec := d
		if stepping {
			dec = waiting
		}
		r := &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
			"decode": {TargetEndpoints: []fwksched.Endpoint{dec}}}}
		if prefill {
			r.ProfileResults["prefill"] = &fwksched.ProfileRunResult{TargetEndpoints: []fwksched.Endpoint{p}}
		}
		return r
	}
	// another request's charges: ~1,000 prompt tokens on both pods
	own := fakeLeases{"ns/p": {PrefillTokens: 1160, PrefillLegs: 1}, "ns/d": {DecodeSlots: 1, DecodeTokens: 1000}}
	tests := []struct {
		name     string
		leases   fakeLeases
		priority int
		prefill  bool
		stepping bool          // the decode pick's scrape shows requests waiting for its next step
		queued   time.Duration // time spent in flow control's queue before the hooks ran
		want     bool          // refused
	}{
		{name: "one request ahead: kept", leases: own, priority: -1, prefill: true},
		{name: "picked prefill pod backed up: refused", priority: -1, prefill: true, want: true,
			leases: fakeLeases{"ns/p": {PrefillTokens: 1160 + 40160, PrefillLegs: 2}, "ns/d": own["ns/d"]}},
		{name: "picked decode pod's KV full: refused", priority: -1, prefill: true, want: true,
			leases: fakeLeases{"ns/p": own["ns/p"], "ns/d": {DecodeSlots: 300, DecodeTokens: 399000}}},
		{name: "one request ahead, but queued in flow control past the TTFT: refused", leases: own, priority: -1,
			prefill: true, queued: time.Second, want: true},
		{name: "requests waiting for the decode pick's next step: kept", leases: fakeLeases{"ns/p": own["ns/p"],
			"ns/d": {DecodeSlots: 5, DecodeTokens: 5000}}, priority: -1, prefill: true, stepping: true},
		{name: "decode-only pick on a pod with room: kept", leases: fakeLeases{"ns/d": own["ns/d"]}, priority: -1},
		{name: "critical: never refused here", priority: 0, prefill: true,
			leases: fakeLeases{"ns/p": {PrefillTokens: 1160 + 40160, PrefillLegs: 2}, "ns/d": own["ns/d"]}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			params, err := ParseParameters("fa", nil)
			if err != nil {
				t.Fatal(err)
			}
			a := New("fa", params)
			a.SetLedger(excluding{t: t, leases: tc.leases, id: "r"}, 160)
			ctx := contract.WithAnswerSlot(context.Background())
			if tc.queued > 0 {
				ctx = contract.WithQueueWait(ctx, tc.queued)
			}
			a.PreRequest(ctx, request(tc.priority, nil), result(tc.prefill, tc.stepping))
			ans := contract.Recorded(ctx)
			if (ans != nil) != tc.want {
				t.Fatalf("answer %v, want refused=%v", ans, tc.want)
			}
			if ans != nil && ans.Status != http.StatusTooManyRequests {
				t.Fatalf("status %d, want 429", ans.Status)
			}
		})
	}
}

// excluding is a ledger that checks that the placement check leaves its request's own charges
// out of the leases it reads.
type excluding struct {
	t      *testing.T
	leases fakeLeases
	id     string
}

func (e excluding) Leases(pods []tokenload.PodKey, out []tokenload.Leases, exclude string) {
	if exclude != e.id {
		e.t.Errorf("leases read leaving out %q, want the request's own %q", exclude, e.id)
	}
	e.leases.Leases(pods, out, exclude)
}
