package forecastadmitter

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// fakeLeases is a ledger's leases by pod key.
type fakeLeases map[tokenload.PodKey]tokenload.Leases

func (f fakeLeases) Leases(pods []tokenload.PodKey, out []tokenload.Leases, _ string) {
	for i, k := range pods {
		out[i] = f[k]
	}
}

func ep(name, role string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: name, Namespace: "ns", Role: role, Metrics: &fwkdl.Metrics{}})
}

// a 4,000-byte prompt: ~1,000 tokens
func request(priority int, headers map[string]string) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r", Headers: headers, Objectives: fwksched.RequestObjectives{Priority: priority},
		Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: strings.Repeat("x", 4000)}}}}
}

func TestAdmitRequest(t *testing.T) {
	pool := []fwksched.Endpoint{ep("p", "prefill"), ep("d", "decode")}
	// 2.4 s of prefill queued on the only prefill pod
	backedUp := fakeLeases{"ns/p": {PrefillTokens: 40160 + 160, PrefillLegs: 1}}
	tests := []struct {
		name     string
		params   string
		leases   fakeLeases
		eps      []fwksched.Endpoint
		priority int
		headers  map[string]string
		queued   time.Duration // time spent in flow control's queue before the hooks ran
		status   int           // 0 = admitted
		reason   string
		decision string // the metric's decision label
	}{
		{name: "idle pool admits", leases: fakeLeases{}, eps: pool, priority: -1, decision: decisionAdmitted},
		{name: "sheddable, prefill queue past the TTFT: 429", leases: backedUp, eps: pool, priority: -1,
			status: http.StatusTooManyRequests, reason: ReasonSaturated, decision: ReasonSaturated},
		{name: "critical is admitted without a forecast", leases: backedUp, eps: pool, priority: 0,
			decision: decisionAdmittedCritical},
		{name: "shedCritical refuses critical too", params: `{"shedCritical": true}`, leases: backedUp, eps: pool,
			status: http.StatusTooManyRequests, reason: ReasonSaturated, decision: ReasonSaturated},
		{name: "the request's own TTFT objective loosens the gate", leases: backedUp, eps: pool, priority: -1,
			headers: map[string]string{HeaderSLOTTFT: "4000"}, decision: decisionAdmitted},
		{name: "the request's own TPOT objective tightens it", leases: fakeLeases{}, eps: pool, priority: -1,
			headers: map[string]string{HeaderSLOTPOT: "5"}, status: http.StatusTooManyRequests, reason: ReasonSaturated,
			decision: ReasonSaturated},
		{name: "an unreadable SLO header keeps the configured objective", leases: fakeLeases{}, eps: pool, priority: -1,
			headers: map[string]string{HeaderSLOTPOT: "fast"}, decision: decisionAdmitted},
		{name: "prefill wait past the client's queue TTL: rejected-ttl-expired", leases: backedUp, eps: pool, priority: -1,
			headers: map[string]string{HeaderInferenceTTL: "500ms"}, status: http.StatusTooManyRequests,
			reason: ReasonTTLExpired, decision: ReasonTTLExpired},
		{name: "a queue TTL longer than the wait: rejected-saturated", leases: backedUp, eps: pool, priority: -1,
			headers: map[string]string{HeaderInferenceTTL: "5s"}, status: http.StatusTooManyRequests,
			reason: ReasonSaturated, decision: ReasonSaturated},
		{name: "headroom takes a share of the target", params: `{"ttft": "60ms", "headroom": 0.5}`, leases: fakeLeases{},
			eps: pool, priority: -1, status: http.StatusTooManyRequests, reason: ReasonSaturated, decision: ReasonSaturated},
		{name: "a short wait in flow control's queue still admits", leases: fakeLeases{}, eps: pool, priority: -1,
			queued: 300 * time.Millisecond, decision: decisionAdmitted},
		{name: "queued in flow control past the TTFT: 429 on an idle pool", leases: fakeLeases{}, eps: pool, priority: -1,
			queued: 1200 * time.Millisecond, status: http.StatusTooManyRequests, reason: ReasonSaturated, decision: ReasonSaturated},
		{name: "the wait and the forecast together past the TTFT: 429", params: `{"ttft": "3500ms"}`, leases: backedUp, eps: pool,
			priority: -1, queued: 700 * time.Millisecond, status: http.StatusTooManyRequests, reason: ReasonSaturated,
			decision: ReasonSaturated},
		{name: "the same backed-up pool without the wait: admitted", params: `{"ttft": "3500ms"}`, leases: backedUp, eps: pool,
			priority: -1, decision: decisionAdmitted},
		{name: "the queue TTL counts the wait in flow control too", leases: backedUp, eps: pool, priority: -1,
			headers: map[string]string{HeaderInferenceTTL: "3s"}, queued: time.Second, status: http.StatusTooManyRequests,
			reason: ReasonTTLExpired, decision: ReasonTTLExpired},
		{name: "nothing decodes: 503", leases: fakeLeases{}, eps: []fwksched.Endpoint{ep("p", "prefill")}, priority: -1,
			status: http.StatusServiceUnavailable, reason: ReasonNoEndpoints, decision: ReasonNoEndpoints},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p, err := ParseParameters("fa", json.RawMessage(tc.params))
			if err != nil {
				t.Fatal(err)
			}
			a := New("fa", p)
			a.SetLedger(tc.leases, 160)
			ctx := context.Background()
			if tc.queued > 0 {
				ctx = contract.WithQueueWait(ctx, tc.queued)
			}
			err = a.AdmitRequest(ctx, request(tc.priority, tc.headers), tc.eps)
			class := classSheddable
			if tc.priority >= 0 {
				class = classCritical
			}
			if got := testutil.ToFloat64(a.m.decisions.WithLabelValues(class, tc.decision)); got != 1 {
				t.Errorf("pdgate_forecast_admission_decisions_total{class=%s,decision=%s} = %v, want 1", class, tc.decision, got)
			}
			plugintest.WantAnswer(t, err, tc.status, contract.Header{Name: DroppedReasonHeader, Value: tc.reason})
		})
	}
}

func TestParameters(t *testing.T) {
	tests := []struct {
		raw  string
		want string // "" = valid
	}{
		{raw: ``},
		{raw: `{"ttft": "800ms", "tpot": "40ms", "headroom": 0.9, "cost": {"decode": {"baseMs": 12, "perSeqMs": 0.1, "perKVTokenMs": 0}}}`},
		{raw: `{"ttft": "0s"}`, want: "ttft"},
		{raw: `{"tpot": "fast"}`, want: "tpot"},
		{raw: `{"headroom": 0}`, want: "headroom"},
		{raw: `{"headroom": 1.5}`, want: "headroom"},
		{raw: `{"ledgerRef": ""}`, want: "ledgerRef"},
		{raw: `{"cost": {"prefill": {"linearMsPerToken": 0}}}`, want: "cost.prefill.linearMsPerToken"},
		{raw: `{"cost": {"decode": {"baseMs": -1}}}`, want: "cost.decode.baseMs"},
		{raw: `{"cost": {"kvTransfer": {"bytesPerToken": 131072, "bandwidthGBps": 0}}}`, want: "bandwidthGBps"},
		{raw: `{"cost": {"meanOutputTokens": 0}}`, want: "meanOutputTokens"},
		{raw: `{"ttfts": "1s"}`, want: "ttfts"},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			_, err := ParseParameters("fa", json.RawMessage(tc.raw))
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("rejected: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), Type)):
				t.Fatalf("err %v, want one naming %s and %q", err, Type, tc.want)
			}
		})
	}
}

// TestOutputBudgetFollowsAdmittedRequests: after a run of long-output requests the leased
// sequences are taken to reserve long outputs, so a decode pod the profile's mean would fit is
// full.
func TestOutputBudgetFollowsAdmittedRequests(t *testing.T) {
	pool := []fwksched.Endpoint{ep("p", "prefill"), ep("d", "decode")}
	// 100 leased sequences, 150,000 prompt tokens: with 128-token outputs ~163k of 400k held
	leases := fakeLeases{"ns/d": {DecodeSlots: 100, DecodeTokens: 150000}}
	long := func() *fwksched.LLMRequest {
		r := request(-1, nil)
		r.Body.Payload = fwksched.PayloadMap{"max_tokens": float64(3000)}
		return r
	}
	p, err := ParseParameters("fa", nil)
	if err != nil {
		t.Fatal(err)
	}
	a := New("fa", p)
	a.SetLedger(fakeLeases{}, 160)
	if err := a.AdmitRequest(context.Background(), request(-1, nil), pool); err != nil {
		t.Fatalf("idle pool refused: %v", err)
	}
	a.SetLedger(leases, 160)
	if err := a.AdmitRequest(context.Background(), request(-1, nil), pool); err != nil {
		t.Fatalf("short outputs so far: refused %v", err)
	}
	a.SetLedger(fakeLeases{}, 160)
	for range 200 {
		if err := a.AdmitRequest(context.Background(), long(), pool); err != nil {
			t.Fatalf("idle pool refused: %v", err)
		}
	}
	a.SetLedger(leases, 160)
	if _, ok := contract.AnswerOf(a.AdmitRequest(context.Background(), request(-1, nil), pool)); !ok {
		t.Fatal("after 200 requests of 3,000-token outputs the leased sequences fill the KV cache: want a refusal")
	}
}
