package replicaledger

import (
	"net/http"
	"testing"
	"time"
)

// With flow control on, flow control decides when a request is dispatched and forecast-admitter
// judges it after that, on two EPP replicas sharing the ledger through Redis, at the topology's
// 2 s scrape:
//   - A request dispatched seconds after it arrived has spent that time of its TTFT;
//     forecast-admitter counts it (contract.QueueWait). Forecasting from the dispatch alone,
//     one EPP admitted all 80 offered, with time to first token up to 26 s against the 2 s
//     objective.
//   - Flow control's saturation gate reads each prefill pod with the legs the EPP sent since the
//     last scrape counted as queued. Counted until the next scrape, legs the pod had long
//     served held the gate shut for most of each interval: one EPP admitted 14 where the decode
//     pods hold about 40, and two replicas 30, each counting only its own legs. The sidecars'
//     prefill-release callback now ends each leg's count when it returns.
//
// So one EPP admits about what the decode pods' KV caches hold, and two replicas within 10 % of
// one.
func TestForecastAdmissionUnderFlowControl(t *testing.T) {
	_, l, urlB := startReplicas(t, "127.0.62", "featureGates: [flowControl]")
	client := &http.Client{Timeout: 3 * time.Minute}
	seq := 0
	one := oneThenTwo(t, client, l.URL, urlB, l.Plan.Topology.Model, &seq)
	// the two decode pods hold about 40 sequences of ~760 tokens in their 16,000-token caches
	if holds := 2 * kvTokens / (maxTokens + 60); 4*one.admitted < 3*holds || 10*one.admitted > 11*holds {
		t.Errorf("one EPP admitted %d of %d: want about what the decode pods hold (%d), at least 75 %% and at most 110 %% of it", one.admitted, offered, holds)
	}
}
