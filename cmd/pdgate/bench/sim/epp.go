package simbench

import (
	"context"
	"fmt"
	"os"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/admission"
	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/plugins/datalayer/prefixproducer"
	"github.com/pdgate/pdgate/plugins/pair/aibrixpdpair"
	"github.com/pdgate/pdgate/plugins/requestcontrol/pdtokenledger"
)

// epp is an EndpointPickerConfig assembled by the EPP's own constructor (cmd/epp/core), with
// the scheduler and the request-control hooks the request path calls, driven on virtual time.
type epp struct {
	sched    *scheduling.Scheduler
	prepare  []fwkrc.PrepareDataPlugin
	admit    []fwkrc.AdmissionPlugin
	pre      []fwkrc.PreRequest
	respHead []fwkrc.ResponseHeader
	respBody []fwkrc.ResponseBody
	// kv are the plugins that take KV events (precise prefix-cache producer or scorer): the
	// pods' prefix-cache changes are delivered to them in process (precise.go)
	kv []kvEventSink
	// dispatches is the request path's ledger of prefill legs sent since each pod's last
	// scrape, on the virtual clock: the scheduler sees prefill pods through it as in the EPP.
	dispatches *admission.Dispatches
	// cpu is the thread CPU time spent inside EPP calls (the loop is locked to its thread).
	cpu   time.Duration
	calls int
	// ledgers are the token-load ledgers put on the virtual clock, swept here (janitor) on it
	ledgers []*ledgerJanitor
	now     func() time.Time // the virtual clock (nil: none)
	// async are the plugins whose PreRequest work finishes on another goroutine; each
	// scheduling call waits for it, so the next request sees it whatever the goroutine
	// scheduling (a run repeats for a seed)
	async []interface{ Wait() }
	// stop ends the plugins' background goroutines (GIE's prefix indexer reports its size
	// every second until the handle's context ends; the indexer stays reachable until then)
	stop context.CancelFunc
}

// loadEPP reads an EndpointPickerConfig file ("" = GIE's default config) and builds it for
// the given pods; now is the virtual clock for plugins that accept one, seed seeds the
// plugins' random sources.
func loadEPP(file string, pods []PodSpec, now func() time.Time, seed int64) (*epp, error) {
	var raw []byte
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read EndpointPickerConfig: %w", err)
		}
		raw = b
	}
	names := make([]types.NamespacedName, len(pods))
	for i, p := range pods {
		names[i] = types.NamespacedName{Namespace: "default", Name: p.Name}
	}
	ctx, stop := context.WithCancel(context.Background())
	c, err := core.New(ctx, core.Options{Config: raw, Standalone: true, Seed: &seed,
		PodNames: func() []types.NamespacedName { return names }})
	if err != nil {
		stop()
		return nil, fmt.Errorf("EndpointPickerConfig %s: %w", file, err)
	}
	h := c.Server.Hooks()
	e := &epp{sched: c.Scheduler, stop: stop, prepare: h.PrepareData, admit: h.Admission, pre: h.PreRequest,
		respHead: h.ResponseHeader, respBody: h.ResponseBody, dispatches: c.Dispatches}
	if now != nil {
		e.dispatches = admission.NewDispatchesAt(now)
		e.now = now
	}
	for _, p := range c.Handle.GetAllPlugins() {
		if pp, ok := p.(*aibrixpdpair.Plugin); ok && now != nil {
			pp.Selector().Now = now
			pp.Selector().Tracker.SetClock(now)
		}
		if pl, ok := p.(*pdtokenledger.Plugin); ok && now != nil {
			t := pl.Tracker()
			t.SetClock(clockFunc(now))
			e.ledgers = append(e.ledgers, &ledgerJanitor{t: t, every: time.Duration(t.Params().JanitorIntervalSeconds) * time.Second, last: now()})
		}
		if pp, ok := p.(*prefixproducer.Producer); ok {
			e.async = append(e.async, pp)
		}
		if k, ok := p.(kvEventSink); ok {
			e.kv = append(e.kv, k)
		}
	}
	return e, nil
}

// clockFunc is a virtual clock as a pdtokenledger.Clock.
type clockFunc func() time.Time

func (f clockFunc) Now() time.Time { return f() }

// ledgerJanitor runs a ledger's janitor pass on virtual time, at the first scheduling call
// `every` or more after the previous pass (SetClock turned the wall-clock janitor off).
type ledgerJanitor struct {
	t     *pdtokenledger.Tracker
	every time.Duration
	last  time.Time
}

func (j *ledgerJanitor) due(now time.Time) {
	if now.Sub(j.last) >= j.every {
		j.t.Sweep()
		j.last = now
	}
}

// threadCPU is the calling thread's CPU time.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// errAdmission marks a request an admission plugin refused (the EPP answers 429/503).
type errAdmission struct{ err error }

func (e errAdmission) Error() string { return "not admitted: " + e.err.Error() }

// schedule runs one request through the director's order: snapshot the endpoints, PrepareData,
// admission, Schedule, PreRequest.
func (e *epp) schedule(ctx context.Context, req *fwksched.LLMRequest, pods []*pod) (*fwksched.SchedulingResult, error) {
	// the ledgers' janitor passes, outside the request's CPU (the EPP runs them in the background)
	for _, j := range e.ledgers {
		j.due(e.now())
	}
	start := threadCPU()
	defer func() { e.cpu += threadCPU() - start; e.calls++ }()
	snap := make([]fwksched.Endpoint, len(pods))
	for i, p := range pods {
		snap[i] = fwksched.NewEndpoint(p.meta, e.dispatches.Seen(p.meta, p.metrics), p.attrs)
	}
	for _, p := range e.prepare {
		_ = p.PrepareRequestData(ctx, req, snap)
	}
	for _, p := range e.admit {
		if err := p.AdmitRequest(ctx, req, snap); err != nil {
			return nil, errAdmission{err}
		}
	}
	res, err := e.sched.Schedule(ctx, req, snap)
	if err != nil {
		return nil, err
	}
	for _, p := range e.pre {
		p.PreRequest(ctx, req, res)
	}
	e.dispatches.Dispatched(res)
	for _, a := range e.async {
		a.Wait()
	}
	return res, nil
}

// responseHeader runs the ResponseHeader hooks (first bytes of the response).
func (e *epp) responseHeader(ctx context.Context, req *fwksched.LLMRequest, headers map[string]string, target *fwkdl.EndpointMetadata) {
	start := threadCPU()
	resp := &fwkrc.Response{RequestId: req.RequestId, Headers: headers}
	for _, p := range e.respHead {
		p.ResponseHeader(ctx, req, resp, target)
	}
	e.cpu += threadCPU() - start
}

// responseEnd runs the ResponseBody hooks for the end of the stream, with usage.
func (e *epp) responseEnd(ctx context.Context, req *fwksched.LLMRequest, prompt, completion int, target *fwkdl.EndpointMetadata) {
	start := threadCPU()
	resp := &fwkrc.Response{RequestId: req.RequestId, Headers: map[string]string{}, EndOfStream: true,
		Usage: fwkrc.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
	for _, p := range e.respBody {
		p.ResponseBody(ctx, req, resp, target)
	}
	e.cpu += threadCPU() - start
}
