package conformance

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	"sigs.k8s.io/gateway-api-inference-extension/test/integration"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// counter reads a pdgate counter series from controller-runtime's registry (0 when absent).
// labels are "name=value" pairs.
func counter(t *testing.T, family string, labels ...string) float64 {
	t.Helper()
	mfs, err := crmetrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join(labels, ",")
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if labelString(m.GetLabel()) == want {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestBodyOverLimit: GIE has no request-body limit; pdgate answers 413 (README, request
// headers and body steps) as soon as a declared content-length or the received body passes
// --max-request-body-bytes, and a body at the limit is served exactly as stock serves it.
func TestBodyOverLimit(t *testing.T) {
	const limit = 64
	pods := []podState{P(0, 0, 0.1), P(1, 5, 0.5)}
	body := `{"model":"my-model","prompt":"` + strings.Repeat("x", 60) + `"}` // 90 bytes
	atLimit := `{"model":"my-model","prompt":"` + strings.Repeat("x", limit-32) + `"}`
	if len(atLimit) != limit {
		t.Fatalf("test body is %d bytes, want %d", len(atLimit), limit)
	}
	want413 := &immediate{Status: 413,
		Body:    string(protocol.ErrorBody(413, "invalid_request_error", fmt.Sprintf("request body exceeds the EPP limit of %d bytes (--max-request-body-bytes)", limit))),
		Headers: map[string]string{"content-type": "application/json", protocol.HeaderErrorCause: "body_too_large"}}
	hdr := map[string]string{reqcommon.RequestIdHeaderKey: "big"}
	declared := map[string]string{reqcommon.RequestIdHeaderKey: "big", "content-length": "90"}
	cases := []struct {
		name     string
		requests []*extProcPb.ProcessingRequest
		over     bool
	}{
		{"streamed frames pass the limit", integration.ReqRaw(hdr, body[:40], body[40:80], body[80:]), true},
		{"one frame over the limit", integration.ReqRaw(hdr, body), true},
		{"declared content-length over the limit", integration.ReqRaw(declared, body), true},
		{"body exactly at the limit", integration.ReqRaw(hdr, atLimit[:30], atLimit[30:]), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, world{pods: pods, crds: true}, gieTestConfig, nil, extproc.Options{MaxRequestBodyBytes: limit})
			stock := run(t, p.stock, tc.requests)
			before := counter(t, "pdgate_epp_request_body_rejected_total")
			pd := run(t, p.pdgate, tc.requests)
			if !stock.Routed || stock.Immediate != nil {
				t.Fatalf("stock GIE has no body limit and must route: %+v", stock)
			}
			if !tc.over {
				if d := compare(stock, pd); d != "" {
					t.Errorf("a body at the limit must be served as stock serves it (-stock +pdgate):\n%s", d)
				}
				return
			}
			if pd.Routed || pd.Immediate == nil {
				t.Fatalf("pdgate must answer 413 and route nothing: %+v", pd)
			}
			if d := cmp.Diff(want413, pd.Immediate); d != "" {
				t.Errorf("pdgate's 413 (-want +got):\n%s", d)
			}
			if got := counter(t, "pdgate_epp_request_body_rejected_total") - before; got != 1 {
				t.Errorf("pdgate_epp_request_body_rejected_total grew by %g, want 1", got)
			}
		})
	}
}

// probeConfig is GIE's hermetic config plus the conformance probe (id, block).
func probeConfig(id, block string) string {
	return strings.Replace(gieTestConfig, "  - type: openai-parser\n",
		fmt.Sprintf("  - type: openai-parser\n  - type: %s\n    parameters:\n      id: %s\n      block: %q\n", probeType, id, block), 1)
}

// TestClientReset: a client that goes away must end the stream on both paths without a hang
// or a leaked handler, mid-body (nothing scheduled) and after routing (the response never
// came). After routing, both must call the ResponseBody hooks once with end-of-stream: that is
// the release a ledger charge relies on (README, step 8).
func TestClientReset(t *testing.T) {
	pods := []podState{P(0, 0, 0.1)}
	for _, tc := range []struct {
		name      string
		requests  []*extProcPb.ProcessingRequest
		responses int // responses to wait for before the reset
		wantEOS   int32
	}{
		{"mid-body", integration.ReqRaw(map[string]string{reqcommon.RequestIdHeaderKey: "r1"}, `{"model":"my-model",`, `"prompt":"x"}`)[:2], 0, 0},
		{"after routing, before the response", integration.ReqLLM(logger, "reset", modelMyModel, ""), 2, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			id := strings.ReplaceAll(t.Name(), "/", "-")
			cfg := probeConfig(id+"-stock", "")
			ctx := t.Context()
			dsS, dsP := world{pods: pods}.datastore(ctx), world{pods: pods}.datastore(ctx)
			stockClient, stockTr := serve(t, newStock(t, ctx, cfg, dsS))
			cfg = probeConfig(id+"-pdgate", "")
			pdClient, pdTr := serve(t, newPdgate(t, ctx, cfg, dsP, extproc.Options{}).Server)
			for _, side := range []struct {
				who    string
				client extProcPb.ExternalProcessorClient
				tr     *tracked
				probe  *probe
			}{
				{"stock", stockClient, stockTr, probeByID(id + "-stock")},
				{"pdgate", pdClient, pdTr, probeByID(id + "-pdgate")},
			} {
				resetAfter(t, side.who, side.client, tc.requests, tc.responses)
				side.tr.waitIdle(t, side.who, 2*time.Second)
				if got := side.probe.bodyEOS.Load(); got != tc.wantEOS {
					t.Errorf("%s: %d end-of-stream ResponseBody calls after the reset, want %d", side.who, got, tc.wantEOS)
				}
			}
		})
	}
}

// resetAfter sends reqs without closing the stream, waits for n responses, then cancels the
// stream as a client reset does.
func resetAfter(t *testing.T, who string, client extProcPb.ExternalProcessorClient, reqs []*extProcPb.ProcessingRequest, n int) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), streamTimeout)
	defer cancel()
	stream, err := client.Process(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			t.Fatalf("%s: send: %v", who, err)
		}
	}
	for i := 0; i < n; i++ {
		if _, err := stream.Recv(); err != nil {
			t.Fatalf("%s: response %d before the reset: %v", who, i, err)
		}
	}
	if n == 0 {
		time.Sleep(50 * time.Millisecond) // let the server take the frames before the reset
	}
	cancel()
}

// TestPrepareDataTimeout: a PrepareData plugin that blocks gets GIE's 400 ms budget on both
// paths: its context is cancelled, the request is scheduled anyway (a PrepareData failure
// does not fail the request), and the outcome is the same.
func TestPrepareDataTimeout(t *testing.T) {
	pods := []podState{P(0, 3, 0.2), P(1, 0, 0.1)}
	reqs := integration.ReqLLM(logger, "slow", modelMyModel, "")
	ctx := t.Context()
	w := world{pods: pods, crds: true}
	stockClient, _ := serve(t, newStock(t, ctx, probeConfig("timeout-stock", "3s"), w.datastore(ctx)))
	pdClient, _ := serve(t, newPdgate(t, ctx, probeConfig("timeout-pdgate", "3s"), w.datastore(ctx), extproc.Options{}).Server)

	timed := func(who string, c extProcPb.ExternalProcessorClient) outcome {
		start := time.Now()
		o := run(t, c, reqs)
		if d := time.Since(start); d < 350*time.Millisecond || d > 2*time.Second {
			t.Errorf("%s: the exchange took %v; GIE's PrepareData budget is 400 ms (the plugin blocks 3 s)", who, d)
		}
		return o
	}
	stock, pd := timed("stock", stockClient), timed("pdgate", pdClient)
	if !stock.Routed {
		t.Fatalf("stock must schedule despite the PrepareData timeout: %+v", stock)
	}
	if d := compare(stock, pd); d != "" {
		t.Errorf("pdgate diverges from stock GIE on a PrepareData timeout (-stock +pdgate):\n%s", d)
	}
	for _, id := range []string{"timeout-stock", "timeout-pdgate"} {
		pr := probeByID(id)
		deadline := time.Now().Add(time.Second)
		for pr.prepareDone.Load() == 0 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
		if !pr.sawCancel.Load() {
			t.Errorf("%s: the blocked PrepareData plugin's context was not cancelled at the budget", id)
		}
	}
}

// TestModelServerStatusHeader: the one documented metrics difference. Envoy sends the
// response status as ":status"; GIE reads only "status", so it never counts a model-server
// error Envoy reports; pdgate reads both. Everything else must conform.
func TestModelServerStatusHeader(t *testing.T) {
	reqs := append(integration.ReqLLM(logger, "s", modelMyModel, ""),
		responseOnly(map[string]string{":status": "503", "content-type": "application/json"}, `{"error":"x"}`)...)
	p := newPair(t, world{pods: []podState{P(0, 0, 0.1)}, crds: true}, gieTestConfig, nil, extproc.Options{})
	stock, pd := run(t, p.stock, reqs), run(t, p.pdgate, reqs)
	const series = "inference_objective_request_error_total{error_code=ModelServerError,model_name=my-model,target_model_name=my-model}"
	if _, ok := stock.Metrics[series]; ok {
		t.Fatalf("stock GIE counted %s from :status; the documented difference no longer holds", series)
	}
	if pd.Metrics[series] != "1" {
		t.Errorf("pdgate must count :status 503 as a model-server error: %v", pd.Metrics)
	}
	delete(pd.Metrics, series)
	stock.DebugHeader = false
	if d := compare(stock, pd); d != "" {
		t.Errorf("pdgate diverges beyond the :status count (-stock +pdgate):\n%s", d)
	}
}

// TestRoutingHeadersRemoved: client copies of protocol.RoutingHeaders reach the model server
// through stock GIE (it echoes every header); pdgate never sets them and removes them.
func TestRoutingHeadersRemoved(t *testing.T) {
	spoof := map[string]string{reqcommon.RequestIdHeaderKey: "spoof", "hi": "mom"}
	for _, h := range protocol.RoutingHeaders {
		spoof[h] = "10.66.66.66:8000"
	}
	reqs := integration.ReqRaw(spoof, `{"model":"my-model","prompt":"p"}`)
	p := newPair(t, world{pods: []podState{P(0, 0, 0.1)}, crds: true}, gieTestConfig, nil, extproc.Options{})
	resps, err := exchange(p.pdgate, reqs)
	if err != nil {
		t.Fatal(err)
	}
	var mut *extProcPb.HeaderMutation
	for _, r := range resps {
		if rh := r.GetRequestHeaders(); rh != nil {
			mut = rh.GetResponse().GetHeaderMutation()
		}
	}
	if mut == nil {
		t.Fatal("pdgate sent no routing decision")
	}
	for _, h := range mut.GetSetHeaders() {
		if strings.Contains(headerValue(h.GetHeader()), "10.66.66.66") {
			t.Errorf("pdgate forwarded a client routing header: %s", h.GetHeader().GetKey())
		}
	}
	for _, h := range protocol.RoutingHeaders {
		if !containsFold(mut.GetRemoveHeaders(), h) {
			t.Errorf("pdgate did not remove the client's %s", h)
		}
	}
	// Apart from that removal the two paths conform (normalise drops the routing headers).
	if d := compare(run(t, p.stock, reqs), run(t, p.pdgate, reqs)); d != "" {
		t.Errorf("(-stock +pdgate):\n%s", d)
	}
}

func containsFold(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}

// readConfig reads a shipped config (relative to the repository root).
func readConfig(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile("../../" + path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPdgateEarlyAnswers asserts pdgate's own early answers, which stock GIE has no
// counterpart for (its director turns a plugin's refusal into a 500 or a 429 for every
// scheduling failure): the conditional-decode 412, the rate cap's 429 and the 503 for a pool
// without decode endpoints. Each answer is a typed contract.Answer, counted by status and
// cause, with no internal header on it.
func TestPdgateEarlyAnswers(t *testing.T) {
	long := strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)
	body := `{"model":"my-model","prompt":"` + long + `"}`
	decode := map[string]string{"llm-d.ai/role": "decode"}
	prefill := map[string]string{"llm-d.ai/role": "prefill"}
	rateCap := strings.Replace(gieTestConfig, "  - type: openai-parser\n",
		"  - type: openai-parser\n  - type: aibrix-rate-cap\n    parameters:\n      defaultRequestsPerSecond: 1\n", 1)
	type step struct {
		headers map[string]string
		want    *immediate // nil: routed
		cause   string
	}
	cases := []struct {
		name   string
		config string
		pods   []podState
		steps  []step
	}{
		{
			name:   "412 conditional decode miss",
			config: readConfig(t, "config/llmd/conditional-decode.yaml"),
			pods:   []podState{P(0, 0, 0.1).withLabels(decode), P(1, 0, 0.1).withLabels(decode)},
			steps: []step{
				{headers: map[string]string{"prefer": "return=minimal, If-Available"},
					want:  &immediate{Status: 412, Body: protocol.ConditionalDecodeBody, Headers: map[string]string{"content-type": "application/json"}},
					cause: "conditional_decode_miss"},
				{headers: map[string]string{"prefer": "return=minimal"}}, // unrelated preference: forwarded
			},
		},
		{
			name:   "429 rate cap",
			config: rateCap,
			pods:   []podState{P(0, 0, 0.1)},
			steps: []step{
				{}, // the first request of the second is admitted
				{want: &immediate{Status: 429,
					Body:    string(protocol.ErrorBody(429, "rate_limit_exceeded", `model "my-model" exceeded its rate limit of 1 requests per second`)),
					Headers: map[string]string{"content-type": "application/json", "retry-after": "1"}},
					cause: "rate_limited"},
			},
		},
		{
			name:   "503 no decode endpoint",
			config: readConfig(t, "config/llmd/pd.yaml"),
			pods:   []podState{P(0, 0, 0.1).withLabels(prefill)},
			steps: []step{{want: &immediate{Status: 503,
				Body:    string(protocol.ErrorBody(503, "routing_error", `failed to find available decode workers: the "decode" profile found no endpoint`)),
				Headers: map[string]string{"content-type": "application/json"}},
				cause: "no_decode_endpoint"}},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			c := newPdgate(t, ctx, tc.config, world{pods: tc.pods}.datastore(ctx), extproc.Options{})
			client, _ := serve(t, c.Server)
			for i, s := range tc.steps {
				h := map[string]string{reqcommon.RequestIdHeaderKey: fmt.Sprintf("early-%d", i), "content-type": "application/json"}
				for k, v := range s.headers {
					h[k] = v
				}
				reqs := integration.ReqRaw(h, body)
				var before float64
				if s.want != nil {
					before = counter(t, "pdgate_epp_immediate_responses_total", "cause="+s.cause, fmt.Sprintf("status=%d", s.want.Status))
				}
				o := run(t, client, reqs)
				if s.want == nil {
					if !o.Routed || o.Immediate != nil {
						t.Fatalf("step %d: want the request routed, got %+v", i, o)
					}
					continue
				}
				if o.Routed {
					t.Fatalf("step %d: want %d, the request was routed: %+v", i, s.want.Status, o)
				}
				// The answer names its cause as the metric labels it (x-pdgate-error-cause).
				s.want.Headers[protocol.HeaderErrorCause] = s.cause
				if d := cmp.Diff(s.want, o.Immediate); d != "" {
					t.Errorf("step %d: pdgate's answer (-want +got):\n%s", i, d)
				}
				for k := range o.Immediate.Headers {
					if strings.HasPrefix(k, "x-pdgate-internal-") {
						t.Errorf("step %d: internal header %s on the answer", i, k)
					}
				}
				after := counter(t, "pdgate_epp_immediate_responses_total", "cause="+s.cause, fmt.Sprintf("status=%d", s.want.Status))
				if after-before != 1 {
					t.Errorf("step %d: pdgate_epp_immediate_responses_total{cause=%s} grew by %g, want 1", i, s.cause, after-before)
				}
			}
		})
	}
}
