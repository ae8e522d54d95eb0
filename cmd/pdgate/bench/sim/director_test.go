package simbench

import (
	"context"
	"encoding/json"
	"io"
	"maps"
	"math/rand"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// outcome is what the EPP did with one request: where it sent it, or what it answered.
type outcome struct {
	Target, Prefill string // x-gateway-destination-endpoint, x-prefiller-host-port
	Status          int    // an answer's HTTP status (0: routed)
	Body            string
	Headers         string
}

// TestSimDecidesAsTheEPP replays the same requests through bench sim's driver (epp.decide, the
// request path's own director) and through a real ext_proc exchange of the EPP's server, each
// over its own EPP built by the one constructor from the same config and seed, on the same
// pods and clock, and requires the same picks and the same answers: aibrix-pd-pair's 503 when
// no pair exists, admission's 429 for a sheddable request on a saturated pool, routed requests
// in between (kept in flight, so the ledgers carry them into the next decisions).
func TestSimDecidesAsTheEPP(t *testing.T) {
	prefillOnly := func() []PodSpec {
		return slices.DeleteFunc(FleetPD(8, "m"), func(p PodSpec) bool { return p.Role != RolePrefill })
	}
	for _, tc := range []struct {
		name, config string
		pods         func() []PodSpec
		saturate     bool
		sheddable    bool // every third request names an InferenceObjective with priority -1
		want         []int
	}{
		{name: "recommended", config: "config/recommended.yaml", pods: func() []PodSpec { return FleetPD(8, "m") }, want: []int{0}},
		{name: "aibrix token-load", config: "config/aibrix/token-load.yaml", pods: func() []PodSpec { return FleetPD(8, "m") }, want: []int{0}},
		{name: "gie default combined", pods: func() []PodSpec { return FleetCombined(6, "m") }, want: []int{0}},
		{name: "aibrix-pd-pair without a pair: 503", config: "config/aibrix/token-load.yaml", pods: prefillOnly, want: []int{503}},
		{name: "sheddable on a saturated pool: 429", config: "config/recommended.yaml", pods: func() []PodSpec { return FleetPD(8, "m") },
			saturate: true, sheddable: true, want: []int{0, 429}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const n = 24
			rng := rand.New(rand.NewSource(5))
			rows := make([]workload.AzureRow, n)
			for i := range rows {
				rows[i] = workload.AzureRow{Offset: time.Duration(i) * time.Millisecond, ContextTokens: 64 + rng.Intn(4000), GeneratedTokens: 16}
			}
			src, err := NewAzureSource(rows, 100, 1, n, 0)
			if err != nil {
				t.Fatal(err)
			}
			cfg := Config{Profile: costmodel.Default(), Pods: tc.pods(), Model: "m", Source: src, Seed: 1}
			if tc.config != "" {
				cfg.EPPConfig = repoFile(tc.config)
			}
			s, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			sim := s.epps[0]
			defer sim.stop()
			// the EPP's server over the same pods and clock (its PrepareData on GIE's goroutine
			// with its timeout, as bin/epp runs it)
			srv, err := buildEPP(cfg.EPPConfig, s.pods, s.clock.Now, cfg.Seed, extproc.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.stop()
			if tc.sheddable {
				low := -1
				for _, e := range []*epp{sim, srv} {
					e.core.Datastore.ObjectiveSet(&v1alpha2.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: "batch", Namespace: "default"},
						Spec: v1alpha2.InferenceObjectiveSpec{Priority: &low}})
				}
			}
			for _, p := range s.pods {
				p.scrape(s.clock.Now())
			}
			ctx := context.Background()
			var open []func() // the server's in-flight exchanges, ended at the end
			var inflight []func()
			got := map[int]int{}
			for i := 0; i < n; i++ {
				a, ok := src.Next()
				if !ok {
					t.Fatal("source ended early")
				}
				if tc.sheddable && i%3 == 0 {
					a.Headers = map[string]string{metadata.ObjectiveKey: "batch"}
				}
				body, err := json.Marshal(map[string]any{"model": "m", "prompt": a.Body.Completions.Prompt.Raw})
				if err != nil {
					t.Fatal(err)
				}
				a.Bytes = len(body)
				// the pods' view moves between requests: a scrape with some work queued
				for j, p := range s.pods {
					m := p.metrics.Clone()
					m.WaitingQueueSize, m.RunningRequestsSize = (i+j)%3, (i*j)%5
					if tc.saturate { // queues deep and the KV cache full: no placement fits
						m.WaitingQueueSize += 100
						m.KVCacheUsagePercent = 1
					}
					m.UpdateTime = s.clock.Now()
					p.metrics = m
					p.ep.UpdateMetrics(m)
				}
				id := "req-" + strconv.Itoa(i)

				llm := s.llmRequest(id, a)
				dec, err := sim.decide(ctx, llm)
				want := simOutcome(t, llm, dec, err)
				if err == nil {
					target := dec.Target
					inflight = append(inflight, func() { sim.responseEnd(ctx, llm, 0, 0, target) })
				}

				heads := map[string]string{"x-request-id": id}
				for k, v := range a.Headers {
					heads[k] = v
				}
				gotOut, end := exchange(t, srv.core.Server, heads, body)
				open = append(open, end)

				if gotOut != want {
					t.Fatalf("request %d: bench sim %+v, the EPP %+v", i, want, gotOut)
				}
				got[want.Status]++
				s.clock.Advance(7 * time.Millisecond)
			}
			for _, f := range append(inflight, open...) {
				f()
			}
			for _, st := range tc.want {
				if got[st] == 0 {
					t.Fatalf("no request got status %d (0: routed); statuses %v", st, got)
				}
			}
			t.Logf("statuses (0: routed): %v", got)
		})
	}
}

// simOutcome is the outcome of bench sim's decision, rendered as the EPP renders it.
func simOutcome(t *testing.T, llm *fwksched.LLMRequest, dec extproc.Decision, err error) outcome {
	t.Helper()
	if err != nil {
		o := outcome{Status: extproc.StatusOf(err)}
		if a, ok := contract.AnswerOf(err); ok {
			o.Body, o.Headers = string(a.Body), answerHeaders(a.ResponseHeaders())
		} else if resp, gerr := errcommon.BuildErrResponse(err); gerr == nil {
			o.Body = string(resp.GetImmediateResponse().GetBody()) // GIE's own error, as GIE renders it
		} else {
			t.Fatalf("unmappable error: %v", err)
		}
		return o
	}
	pr := dec.Result.ProfileResults[dec.Result.PrimaryProfileName]
	addrs := make([]string, len(pr.TargetEndpoints))
	for i, ep := range pr.TargetEndpoints {
		md := ep.GetMetadata()
		addrs[i] = net.JoinHostPort(md.GetIPAddress(), md.GetPort())
	}
	return outcome{Target: strings.Join(addrs, ","), Prefill: protocol.HeaderValue(llm.Headers, protocol.HeaderPrefillerHostPort)}
}

func answerHeaders(hs []contract.Header) string {
	var out []string
	for _, h := range hs {
		out = append(out, strings.ToLower(h.Name)+"="+h.Value)
	}
	slices.Sort(out)
	return strings.Join(out, ";")
}

// exchange sends one request (headers, then the whole body) through the EPP's ext_proc server
// in full-duplex streaming mode, as Envoy does, and returns its decision; the exchange stays
// open (the request in flight) until end is called.
func exchange(t *testing.T, srv *extproc.Server, headers map[string]string, body []byte) (outcome, func()) {
	t.Helper()
	st := &pipe{ctx: context.Background(), in: make(chan *extProcPb.ProcessingRequest, 2), out: make(chan *extProcPb.ProcessingResponse, 64)}
	hm := &corev3.HeaderMap{}
	for k, v := range headers {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	st.in <- &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestHeaders{RequestHeaders: &extProcPb.HttpHeaders{Headers: hm}}}
	st.in <- &extProcPb.ProcessingRequest{Request: &extProcPb.ProcessingRequest_RequestBody{RequestBody: &extProcPb.HttpBody{Body: body, EndOfStream: true}}}
	done := make(chan error, 1)
	go func() { done <- srv.Process(st); close(st.out) }()
	end := func() {
		close(st.in)
		if err := <-done; err != nil {
			t.Errorf("ext_proc stream: %v", err)
		}
	}
	first, ok := <-st.out
	if !ok {
		t.Fatalf("the EPP sent nothing: %v", <-done)
	}
	if ir := first.GetImmediateResponse(); ir != nil {
		var hs []contract.Header
		for _, h := range ir.GetHeaders().GetSetHeaders() {
			hs = append(hs, contract.Header{Name: h.GetHeader().GetKey(), Value: string(h.GetHeader().GetRawValue())})
		}
		return outcome{Status: int(ir.GetStatus().GetCode()), Body: string(ir.GetBody()), Headers: answerHeaders(hs)}, end
	}
	var o outcome
	for _, h := range first.GetRequestHeaders().GetResponse().GetHeaderMutation().GetSetHeaders() {
		switch strings.ToLower(h.GetHeader().GetKey()) {
		case metadata.DestinationEndpointKey:
			o.Target = string(h.GetHeader().GetRawValue())
		case protocol.HeaderPrefillerHostPort:
			o.Prefill = string(h.GetHeader().GetRawValue())
		}
	}
	for r := range st.out { // the body goes back upstream in chunks
		if r.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse().GetEndOfStream() {
			break
		}
	}
	return o, end
}

// pipe is an in-process ext_proc stream: Recv blocks until the test sends or closes in.
type pipe struct {
	extProcPb.ExternalProcessor_ProcessServer
	ctx context.Context
	in  chan *extProcPb.ProcessingRequest
	out chan *extProcPb.ProcessingResponse
}

func (p *pipe) Context() context.Context { return p.ctx }
func (p *pipe) Recv() (*extProcPb.ProcessingRequest, error) {
	r, ok := <-p.in
	if !ok {
		return nil, io.EOF
	}
	return r, nil
}
func (p *pipe) Send(r *extProcPb.ProcessingResponse) error { p.out <- r; return nil }

// TestRunCountsEPPAnswers: requests the EPP answers itself are not routed and are counted by
// status in the results (sim.json's EPPAnswers, the report's "EPP answers" column): an
// aibrix-pd-pair fleet without decode pods answers every request 503.
func TestRunCountsEPPAnswers(t *testing.T) {
	for _, tc := range []struct {
		name   string
		pods   []PodSpec
		want   map[string]int
		served int
	}{
		{name: "no pair: 503", pods: slices.DeleteFunc(FleetPD(8, "m"), func(p PodSpec) bool { return p.Role != RolePrefill }),
			want: map[string]int{"503": 40}},
		{name: "pairs: none", pods: FleetPD(8, "m"), want: map[string]int{}, served: 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rows := make([]workload.AzureRow, 40)
			for i := range rows {
				rows[i] = workload.AzureRow{Offset: time.Duration(i) * 10 * time.Millisecond, ContextTokens: 500, GeneratedTokens: 8}
			}
			src, err := NewAzureSource(rows, 100, 1, 40, 0)
			if err != nil {
				t.Fatal(err)
			}
			res := run(t, Config{Profile: costmodel.Default(), Pods: tc.pods, Model: "m", Source: src, Seed: 1,
				EPPConfig: repoFile("config/aibrix/token-load.yaml")})
			if !maps.Equal(res.Summary.EPPAnswers, tc.want) || res.Summary.Served != tc.served {
				t.Fatalf("EPP answers %v, served %d; want %v, %d (failed %v)", res.Summary.EPPAnswers, res.Summary.Served, tc.want, tc.served, res.Summary.Failed)
			}
			if got := answersCell(res.Summary.EPPAnswers); (len(tc.want) == 0) != (got == "0") {
				t.Fatalf("report cell %q", got)
			}
		})
	}
}
