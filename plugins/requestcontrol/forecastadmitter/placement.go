package forecastadmitter

import (
	"context"
	"fmt"
	"net/http"
	"time"

	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// The placement check. Admission forecasts the best placement, but the scheduler scores by its
// own policy and may pick another: a decode pod whose KV cache is full (the engine then queues
// the request until sequences end) or a prefill pod with a longer queue. So once the pods are
// picked (PreRequest, before anything is dispatched) the forecast is taken again on the pick,
// and a refusable request whose pick misses its objective is answered as at admission. The
// pick's own ledger charges are already in the ledger, which leaves them out of the leases it
// reads; the answer ends the request, and the request path's end-of-stream hooks release them.

var _ fwkrc.PreRequest = (*Admitter)(nil)

// PreRequest implements fwkrc.PreRequest.
func (a *Admitter) PreRequest(ctx context.Context, req *fwksched.LLMRequest, res *fwksched.SchedulingResult) {
	if req == nil || res == nil || (req.Objectives.Priority >= 0 && !a.p.ShedCritical) {
		return
	}
	decode, prefill := picks(res)
	if decode == nil {
		return
	}
	ttft, tpot := a.objective(req.Headers)
	waited := contract.QueueWait(ctx)
	d := Demand{PromptTokens: podmodel.PromptTokens(req), OutputTokens: podmodel.RequestHints(req).MaxTokens}
	pods := []fwksched.Endpoint{decode}
	if prefill != nil {
		pods = append(pods, prefill)
	} else {
		d.DecodeOnly = true
	}
	a.mu.Lock()
	a.keys, a.pods = a.keys[:0], a.pods[:0]
	for _, ep := range pods {
		a.add(ep)
	}
	// the pick's own charges (a decode slot, a prefill leg) are left out by the ledger
	a.readLeases(req.RequestId)
	d.LeasedOutput = a.outMean
	if prefill != nil {
		a.pods[0].Kind, a.pods[1].Kind = KindDecode, KindPrefill
	}
	f := a.p.Cost.Predict(a.pods, d, scale(remaining(ttft, waited), a.p.Headroom), scale(tpot, a.p.Headroom), a.reqCost)
	a.mu.Unlock()
	f.TTFT += waited
	if f.Met {
		return
	}
	class := classSheddable
	if req.Objectives.Priority >= 0 {
		class = classCritical
	}
	a.m.decided(class, decisionPickMissed)
	msg := fmt.Sprintf("%s: the scheduler's placement misses the objective (TTFT %v, TPOT %v): forecast TTFT %v (queued %v), TPOT %v, KV room %v",
		Type, ttft, tpot, f.TTFT.Round(time.Millisecond), waited.Round(time.Millisecond), f.TPOT.Round(10*time.Microsecond), f.Room > 0)
	contract.Record(ctx, answer(http.StatusTooManyRequests, CauseForecastMiss, ReasonSaturated, msg))
}

// picks are the scheduling result's decode pick (the primary profile's) and prefill pick (a
// prefill-tier pod of another profile), nil when absent.
func picks(res *fwksched.SchedulingResult) (decode, prefill fwksched.Endpoint) {
	for name, pr := range res.ProfileResults {
		if pr == nil || len(pr.TargetEndpoints) == 0 || pr.TargetEndpoints[0] == nil {
			continue
		}
		ep := pr.TargetEndpoints[0]
		md := ep.GetMetadata()
		if md == nil {
			continue
		}
		switch {
		case name == res.PrimaryProfileName:
			decode = ep
		case kindOf(md.Labels) == KindPrefill:
			prefill = ep
		}
	}
	return decode, prefill
}

// add appends an endpoint's key and scraped view to the scratch buffers (a.mu held).
func (a *Admitter) add(ep fwksched.Endpoint) {
	md := ep.GetMetadata()
	p := Pod{Kind: kindOf(md.Labels)}
	if m := ep.GetMetrics(); m != nil {
		p.Scraped = m.RunningRequestsSize + m.WaitingQueueSize
		p.KVCapacity, p.KVUsage = m.KvCacheMaxTokenCapacity, m.KVCacheUsagePercent
	}
	name := md.PodName
	if name == "" {
		name = md.NamespacedName.Name
	}
	a.keys = append(a.keys, tokenload.PodKey(md.NamespacedName.Namespace+"/"+name))
	a.pods = append(a.pods, p)
}

// readLeases fills the scratch pods' leases from the ledger, less request exclude's own charges
// (a.mu held).
func (a *Admitter) readLeases(exclude string) {
	if a.leases == nil {
		return
	}
	if cap(a.got) < len(a.keys) {
		a.got = make([]tokenload.Leases, len(a.keys))
	}
	a.got = a.got[:len(a.keys)]
	a.leases.Leases(a.keys, a.got, exclude)
	for i := range a.pods {
		a.pods[i].Leases = a.got[i]
	}
}
