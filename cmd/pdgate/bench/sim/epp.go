package simbench

import (
	"context"
	"fmt"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/core"
	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// epp is an EndpointPickerConfig assembled by the EPP's own constructor (cmd/epp/core), driven
// through the request path's own director (extproc.Director: admission, PrepareData,
// Schedule, the early-answer slot, PreRequest, the dispatch ledger, the response hooks) on
// virtual time, over the simulated pods.
type epp struct {
	core *core.Core
	dir  *extproc.Director
	// kv are the plugins that take KV events (precise prefix-cache producer or scorer): the
	// pods' prefix-cache changes are delivered to them in process (precise.go)
	kv []kvEventSink
	// cpu is the thread CPU time spent inside EPP calls (the loop is locked to its thread).
	cpu   time.Duration
	calls int
	// janitors are the plugins' janitor passes, run here on the virtual clock
	janitors []*janitor
	now      func() time.Time // the virtual clock
	// async are the plugins whose PreRequest work finishes on another goroutine; each
	// scheduling call waits for it, so the next request sees it whatever the goroutine
	// scheduling (a run repeats for a seed)
	async []contract.Settler
	// pool is the candidate set the EPP schedules over (the replica actuator changes it)
	pool *podCandidates
	// advisors are the plugins the replica actuator reads, found by their contract interface
	advisors []contract.ReplicaAdvisor
	// stop ends the plugins' background goroutines (GIE's prefix indexer reports its size
	// every second until the handle's context ends; the indexer stays reachable until then)
	stop context.CancelFunc
}

// podCandidates are the simulated pods as the EPP's endpoint candidates: their metadata,
// the metrics of their last scrape and their data-layer attributes. The replica actuator
// replaces them as pods join and leave (set); the loop is single-threaded, but plugins may
// read the pod names from goroutines of their own.
type podCandidates struct {
	mu    sync.Mutex
	eps   []fwkdl.Endpoint
	names []types.NamespacedName
}

func (c *podCandidates) Locate(context.Context, map[string]any) []fwkdl.Endpoint {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.eps
}

func (c *podCandidates) podNames() []types.NamespacedName {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.names
}

// set makes pods the pool (new slices: a caller may still hold the old ones).
func (c *podCandidates) set(pods []*pod) {
	eps := make([]fwkdl.Endpoint, len(pods))
	names := make([]types.NamespacedName, len(pods))
	for i, p := range pods {
		eps[i], names[i] = p.ep, p.meta.NamespacedName
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.eps, c.names = eps, names
}

// loadEPP reads an EndpointPickerConfig file ("" = GIE's default config) and builds it for
// the given pods; now is the virtual clock (the pods' metrics are taken on it), seed seeds
// the plugins' random sources.
func loadEPP(file string, pods []*pod, now func() time.Time, seed int64) (*epp, error) {
	return buildEPP(file, pods, now, seed, extproc.Options{InlinePrepareData: true})
}

// buildEPP is loadEPP with the request path's options.
func buildEPP(file string, pods []*pod, now func() time.Time, seed int64, path extproc.Options) (*epp, error) {
	var raw []byte
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("read EndpointPickerConfig: %w", err)
		}
		raw = b
	}
	cands := &podCandidates{}
	cands.set(pods)
	ctx, stop := context.WithCancel(context.Background())
	c, err := core.New(ctx, core.Options{Config: raw, Standalone: true, Seed: &seed,
		PodNames: cands.podNames, Candidates: cands, Clock: now,
		Path: path})
	if err != nil {
		stop()
		return nil, fmt.Errorf("EndpointPickerConfig %s: %w", file, err)
	}
	e := &epp{core: c, dir: c.Server.Director(), stop: stop, now: now, pool: cands}
	// Plugins that keep time say so through contract's interfaces; none is named here.
	for _, p := range c.Handle.GetAllPlugins() {
		if cp, ok := p.(contract.Clocked); ok {
			cp.UseClock(now)
		}
		if sp, ok := p.(contract.Swept); ok {
			e.janitors = append(e.janitors, &janitor{p: sp, every: sp.SweepEvery(), last: now()})
		}
		if sp, ok := p.(contract.Settler); ok {
			e.async = append(e.async, sp)
		}
		if k, ok := p.(kvEventSink); ok {
			e.kv = append(e.kv, k)
		}
		if a, ok := p.(contract.ReplicaAdvisor); ok {
			e.advisors = append(e.advisors, a)
		}
	}
	return e, nil
}

// janitor runs a plugin's janitor pass on virtual time, at the first scheduling call `every`
// or more after the previous pass (UseClock turned the wall-clock janitor off).
type janitor struct {
	p     contract.Swept
	every time.Duration
	last  time.Time
}

func (j *janitor) due(now time.Time) {
	if now.Sub(j.last) >= j.every {
		j.p.Sweep()
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

// decide runs one request through the request path's director (the same code, in the same
// order, as bin/epp after it parsed the body): the decision, or the error the EPP answers the
// client with (extproc.StatusOf). A request picked and then answered (dec.Target set) was
// already ended with the end-of-stream hooks, as the EPP ends it.
func (e *epp) decide(ctx context.Context, req *fwksched.LLMRequest) (extproc.Decision, error) {
	// the plugins' janitor passes, outside the request's CPU (the EPP runs them in the background)
	for _, j := range e.janitors {
		j.due(e.now())
	}
	start := threadCPU()
	defer func() { e.cpu += threadCPU() - start; e.calls++ }()
	dec, err := e.dir.Decide(ctx, extproc.NewRequest(req, req.TargetModel, e.now()))
	if err != nil && dec.Target != nil {
		e.dir.ResponseBody(ctx, req, &fwkrc.Response{RequestId: req.RequestId, EndOfStream: true}, dec.Target)
	}
	for _, a := range e.async {
		a.Wait()
	}
	return dec, err
}

// responseHeader runs the ResponseHeader hooks (first bytes of the response).
func (e *epp) responseHeader(ctx context.Context, req *fwksched.LLMRequest, headers map[string]string, target *fwkdl.EndpointMetadata) {
	start := threadCPU()
	e.dir.ResponseHeader(ctx, req, &fwkrc.Response{RequestId: req.RequestId, Headers: headers}, target)
	e.cpu += threadCPU() - start
}

// responseEnd runs the ResponseBody hooks for the end of the stream, with usage.
func (e *epp) responseEnd(ctx context.Context, req *fwksched.LLMRequest, prompt, completion int, target *fwkdl.EndpointMetadata) {
	start := threadCPU()
	resp := &fwkrc.Response{RequestId: req.RequestId, Headers: map[string]string{}, EndOfStream: true,
		Usage: fwkrc.Usage{PromptTokens: prompt, CompletionTokens: completion, TotalTokens: prompt + completion}}
	e.dir.ResponseBody(ctx, req, resp, target)
	e.cpu += threadCPU() - start
}
