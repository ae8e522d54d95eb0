package epp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// bodiesPerSize is how many distinct bodies each size cycles through: enough that
// consecutive requests differ, few enough to build them up front (the client's CPU is
// shared with the EPP).
const bodiesPerSize = 64

// rig is what every config's run shares: the control plane, the fake model servers, the
// request bodies.
type rig struct {
	o       Options
	root    string
	dir     string
	cluster *eppharness.Cluster
	ms      *eppharness.ModelServers
	hosts   []string
	bodies  map[int][][]byte
	// otlp receives the traced configs' spans; started with the first of them.
	otlp *eppharness.OTLPReceiver
}

func measure(ctx context.Context, o Options, configs []Config) (*Results, error) {
	root, err := eppharness.RepoRoot()
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	dir, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, err
	}
	g := &rig{o: o, root: root, dir: dir, bodies: map[int][][]byte{}}
	nHosts := max(2*Primary, o.MemoryEndpoints, o.Pods)
	if g.hosts, err = eppharness.LoopbackAddresses(nHosts); err != nil {
		return nil, err
	}
	if g.ms, err = eppharness.StartModelServers(g.hosts, 0, eppharness.EngineMetrics{}); err != nil {
		return nil, err
	}
	defer g.ms.Close()
	o.logf("starting kube-apiserver + etcd (envtest)")
	if g.cluster, err = eppharness.StartCluster(eppharness.ClusterOptions{WorkDir: dir}); err != nil {
		return nil, err
	}
	defer func() { _ = g.cluster.Stop() }()
	defer func() {
		if g.otlp != nil {
			g.otlp.Close()
		}
	}()
	for _, s := range o.Sizes {
		for i := 0; i < bodiesPerSize; i++ {
			seed := uint64(s)*1000 + uint64(i)
			if o.StreamEvents > 0 {
				g.bodies[s] = append(g.bodies[s], ChatStreamBody(s, seed))
			} else {
				g.bodies[s] = append(g.bodies[s], ChatBody(s, seed))
			}
		}
	}
	res := &Results{Sizes: o.Sizes, Concurrency: o.Concurrency, Conns: o.Conns, ChunkSize: o.ChunkSize, Parser: o.Parser, Pods: o.Pods, StreamEvents: o.StreamEvents, Meter: o.MeterName()}
	for _, c := range configs {
		if ctx.Err() != nil {
			return res, ctx.Err()
		}
		cr := g.runConfig(ctx, c)
		if cr.Error != "" {
			o.logf("%s: %s", c.Name, cr.Error)
		}
		res.Configs = append(res.Configs, cr)
	}
	if o.MemoryEndpoints > 0 {
		for _, c := range configs {
			if ctx.Err() != nil {
				return res, ctx.Err()
			}
			res.Memory = append(res.Memory, g.memory(ctx, c, o.MemoryEndpoints))
		}
	}
	return res, ctx.Err()
}

// start starts the config's EPP over its layout and waits until every pod was scraped twice.
func (g *rig) start(ctx context.Context, c Config, primary int, pool string) (*eppharness.EPP, []string, string, error) {
	eps, prim, err := Layout(c.Layout, primary, g.hosts, g.ms.Port)
	if err != nil {
		return nil, nil, "", err
	}
	cfg, note, err := prepareConfig(g.root, g.dir, c, g.o.Parser)
	if err != nil {
		return nil, nil, "", err
	}
	logf, err := os.Create(filepath.Join(g.dir, pool+".log"))
	if err != nil {
		return nil, nil, "", err
	}
	otlp := ""
	if c.Traced {
		if g.otlp == nil {
			if g.otlp, err = eppharness.StartOTLPReceiver(); err != nil {
				_ = logf.Close()
				return nil, nil, note, err
			}
		}
		otlp, note = g.otlp.Addr, note+fmt.Sprintf(", tracing on (%s of requests sampled, OTLP gRPC to the bench)", report.F(g.o.sampleRatio(), 2))
	}
	base := g.ms.Snapshot()
	e, err := eppharness.Start(ctx, g.o.harnessOptions(eppharness.Options{Kind: c.Kind, ConfigFile: cfg, Endpoints: eps,
		BinDir: g.o.BinDir, WorkDir: g.dir, Log: logf, Cluster: g.cluster, PoolName: poolName(pool),
		ReadyTimeout: 3 * time.Minute, OTLPEndpoint: otlp, OTLPSampleRatio: g.o.sampleRatio()}))
	if err != nil {
		_ = logf.Close()
		return nil, nil, note, err
	}
	go func() { <-e.Exited(); _ = logf.Close() }()
	var hosts []string
	for _, ep := range eps {
		hosts = append(hosts, ep.Address)
	}
	if c.Kind == eppharness.KindFloor {
		return e, prim, note, nil // the floor scrapes nothing
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := g.ms.WaitScraped(wctx, base, 2, hosts...); err != nil {
		_ = e.Stop()
		return nil, nil, note, fmt.Errorf("%w\n%s", err, e.LogTail())
	}
	return e, prim, note, nil
}

// runConfig measures one config: idle CPU, the load phase per size, the burst, memory.
func (g *rig) runConfig(ctx context.Context, c Config) (cr ConfigResult) {
	o := g.o
	cr.Config = c
	o.logf("%s: starting %s EPP", c.Name, c.Kind)
	primary := PoolPrimary(c.Layout, o.Pods)
	e, prim, note, err := g.start(ctx, c, primary, c.Name)
	cr.Loaded, cr.PrimaryPods = note, prim
	if err != nil {
		cr.Error = err.Error()
		return cr
	}
	defer func() {
		// A slow shutdown is not a measurement failure: say so and go on.
		if err := e.Stop(); err != nil {
			o.logf("%s: stopping: %v", c.Name, err)
		}
	}()
	eps, _, _ := Layout(c.Layout, primary, g.hosts, g.ms.Port)
	cr.Pods = len(eps)
	client, err := dial(e.GRPCAddr, o.Conns, o.ChunkSize, o.messageTimeout())
	if err != nil {
		cr.Error = err.Error()
		return cr
	}
	defer client.Close()
	meter := o.meter(e)
	hosts := make([]string, len(eps))
	for i, ep := range eps {
		hosts[i] = ep.Address
	}
	scrapes := func() int64 { return g.ms.ScrapesOf(hosts...) }
	window, slices := o.idleWindow()
	// Each metered window starts right after a full collection, uncounted (collect.go).
	collect := func(what string) error {
		if err := collectGarbage(ctx, http.DefaultClient, e.MetricsAddr); err != nil {
			return fmt.Errorf("before %s: %w", what, err)
		}
		return nil
	}
	if err := collect("the idle window"); err != nil {
		cr.Error = err.Error()
		return cr
	}
	if cr.Idle, err = MeasureIdle(ctx, meter, scrapes, window, slices, sleepCtx); err != nil {
		cr.Error = err.Error()
		return cr
	}
	cr.IdleCPUMSPerS = cr.Idle.MSPerS()
	o.logf("%s: idle %.3f ms/s, %d scrapes in %s: %s per scrape", c.Name, cr.IdleCPUMSPerS, cr.Idle.Scrapes, window, idlePerScrapeText(cr.Idle))
	// Read outside the metered windows: before the collection that starts one, after its end.
	decisions := o.decisionReader(ctx, c, e)
	spans0, sent := g.spans(), 0
	var settle func(context.Context)
	if c.Traced {
		settle = func(ctx context.Context) { g.settledSpans(ctx) }
	}
	for i, size := range o.Sizes {
		mk := g.maker(c.Name, size)
		// The warm-up sends every body the phase will send at least once, so the measured
		// phases meet no body for the first time: a first sight misses every prefix cache
		// and, under a P/D config, takes a prefill leg.
		warm := LoadSpec{Requests: max(20, o.Requests[i]/10, min(bodiesPerSize, o.Requests[i])), Concurrency: o.Concurrency, MaxDuration: o.MaxPhase / 4,
			Make: mk("warm"), Settle: settle}
		before := decisions()
		wr, err := RunLoad(ctx, client, warm, meter)
		if err != nil {
			cr.Error = fmt.Sprintf("warm-up at %d B: %v", size, err)
			return cr
		}
		if d := decisions().sub(before); before != nil {
			o.logf("%s: %s warm-up: %d req, decisions: %s", c.Name, sizeLabel(size), wr.Requests, d)
		}
		sent += wr.Requests
		var runs []LoadResult
		var nets []float64
		for r := range max(1, o.Repeats) {
			phase := "run"
			if r > 0 {
				phase = fmt.Sprintf("run%d", r)
			}
			spec := LoadSpec{Requests: o.Requests[i], Concurrency: o.Concurrency, MaxDuration: o.MaxPhase, Make: mk(phase), Settle: settle, Scrapes: scrapes}
			before := decisions()
			if err := collect(fmt.Sprintf("the load at %d B", size)); err != nil {
				cr.Error = err.Error()
				return cr
			}
			var profiled <-chan error
			if o.CPUProfile > 0 && i == len(o.Sizes)-1 && r == 0 {
				name := fmt.Sprintf("%s-%s.pprof", c.Name, strings.ReplaceAll(sizeLabel(size), " ", ""))
				profiled = startCPUProfile(ctx, e.MetricsAddr, o.CPUProfile, filepath.Join(o.Out, name))
			}
			lr, err := RunLoad(ctx, client, spec, meter)
			if profiled != nil {
				if perr := <-profiled; perr != nil {
					o.logf("%s: cpu profile: %v", c.Name, perr)
				}
			}
			if err != nil {
				cr.Error = fmt.Sprintf("load at %d B: %v", size, err)
				return cr
			}
			if o.Instructions && r == 0 {
				name := fmt.Sprintf("%s-%s.callgrind", c.Name, strings.ReplaceAll(sizeLabel(size), " ", ""))
				if perr := e.KeepInstructionProfile(filepath.Join(o.Out, name)); perr != nil {
					o.logf("%s: instruction profile: %v", c.Name, perr)
				}
			}
			if before != nil {
				lr.Decisions = decisions().sub(before)
			}
			runs, nets = append(runs, lr), append(nets, netOnly(cr.Idle.Net(lr)))
			sent += lr.Requests
		}
		m := medianRun(nets)
		lr := runs[m]
		net, netErr := cr.Idle.Net(lr)
		sr := SizeResult{Bytes: size, Load: lr,
			RoutingP50MS: report.Percentile(lr.RoutingMS, 50), RoutingP99MS: report.Percentile(lr.RoutingMS, 99),
			NetCPUMS: net, NetCPUErrMS: netErr, NetCPUPerSecondMS: cr.Idle.NetPerSecond(lr)}
		if len(nets) > 1 {
			sr.NetCPURepeatsMS = nets
		}
		cr.Sizes = append(cr.Sizes, sr)
		o.logf("%s: %s: %d req in %.1fs, %.0f req/s, EPP CPU %.3f ms/req (net %.3f ± %.3f, per second %.3f%s), %.1f scrapes/s, routing p50 %.2f ms p99 %.2f ms, errors %d%s",
			c.Name, sizeLabel(size), lr.Requests, lr.Wall.Seconds(), lr.ReqPerSec(), lr.CPUPerRequestMS(), sr.NetCPUMS, sr.NetCPUErrMS,
			sr.NetCPUPerSecondMS, spreadText(sr.NetCPURepeatsMS), float64(lr.Scrapes)/lr.Wall.Seconds(), sr.RoutingP50MS, sr.RoutingP99MS, lr.Requests-lr.OK,
			decisionsText(runs))
	}
	if c.Traced {
		cr.SpansPerRequest = float64(g.spans()-spans0) / float64(max(sent, 1))
		o.logf("%s: %.2f spans per request reached the OTLP receiver", c.Name, cr.SpansPerRequest)
	}
	if o.Burst > 0 {
		b := RunBurst(ctx, client, o.Burst, func(i int) *Exchange {
			body := BurstBody(i)
			resp := CompletionBody(i, len(body)/4)
			return &Exchange{Headers: RequestHeaders(fmt.Sprintf("%s-burst-%d", c.Name, i), len(body)), Body: body,
				RespHeaders: ResponseHeaders(len(resp)), RespBody: resp}
		})
		cr.Burst, cr.Spread = &b, Spread(b.Dest, prim)
		o.logf("%s: burst of %d over %d equal pods: max/min %s, errors %d", c.Name, b.Requests, len(prim), report.F(cr.Spread, 2), b.Errors)
	}
	if m, err := e.Memory(); err == nil {
		cr.Memory = m
	}
	return cr
}

// spans is what the OTLP receiver has got so far (0 before any traced config).
func (g *rig) spans() int64 {
	if g.otlp == nil {
		return 0
	}
	return g.otlp.Spans()
}

// settledSpans waits until the receiver's count has not moved for eppharness.ExportQuiet (at
// most a minute) and returns it.
func (g *rig) settledSpans(ctx context.Context) int64 {
	n, still := g.spans(), time.Now()
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); {
		select {
		case <-ctx.Done():
			return n
		case <-time.After(250 * time.Millisecond):
		}
		if m := g.spans(); m != n {
			n, still = m, time.Now()
		} else if time.Since(still) >= eppharness.ExportQuiet {
			break
		}
	}
	return n
}

// sampleRatio is the traced configs' sampling ratio, 1 when unset.
func (o *Options) sampleRatio() float64 {
	if o.TraceSampleRatio <= 0 {
		return 1
	}
	return o.TraceSampleRatio
}

// poolName is an InferencePool (and namespace) name for a config's: "+" is no DNS-1123 character.
func poolName(config string) string { return strings.ReplaceAll(config, "+", "-") }

// maker builds the exchanges of one size; phase keeps request ids unique across phases.
func (g *rig) maker(config string, size int) func(phase string) func(int) *Exchange {
	bodies := g.bodies[size]
	return func(phase string) func(int) *Exchange {
		return func(i int) *Exchange {
			body := bodies[i%len(bodies)]
			x := &Exchange{Headers: RequestHeaders(fmt.Sprintf("%s-%d-%s-%d", config, size, phase, i), len(body)), Body: body}
			if g.o.StreamEvents > 0 {
				x.RespHeaders, x.RespEvents = StreamResponseHeaders(), StreamedCompletion(i, len(body)/4, g.o.StreamEvents)
			} else {
				x.RespBody = CompletionBody(i, len(body)/4)
				x.RespHeaders = ResponseHeaders(len(x.RespBody))
			}
			return x
		}
	}
}

// memory starts the config's EPP over n idle endpoints and reads its resident memory once
// every endpoint has been scraped twice.
func (g *rig) memory(ctx context.Context, c Config, n int) MemoryResult {
	primary := n / 2
	if c.Layout == "plain" {
		primary = n
	}
	mr := MemoryResult{Config: c.Name, Endpoints: n}
	g.o.logf("%s: memory with %d endpoints", c.Name, n)
	e, _, _, err := g.start(ctx, c, primary, c.Name+"-mem")
	if err != nil {
		mr.Error = err.Error()
		return mr
	}
	defer func() { _ = e.Stop() }()
	if mr.Memory, err = e.Memory(); err != nil {
		mr.Error = err.Error()
	}
	return mr
}

func sizeLabel(b int) string {
	if b >= 1<<10 && b%(1<<10) == 0 {
		return fmt.Sprintf("%d KB", b>>10)
	}
	return fmt.Sprintf("%d B", b)
}

// startCPUProfile fetches addr's /debug/pprof/profile for d into file; the channel reports
// when the profile is written (or why not).
func startCPUProfile(ctx context.Context, addr string, d time.Duration, file string) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- func() error {
			secs := max(1, int(d.Round(time.Second)/time.Second))
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, secs), nil)
			if err != nil {
				return err
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				return fmt.Errorf("fetching the profile: %w", err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
				return fmt.Errorf("fetching the profile: %s: %s", resp.Status, msg)
			}
			if err := os.MkdirAll(filepath.Dir(file), 0o755); err != nil {
				return err
			}
			f, err := os.Create(file)
			if err != nil {
				return err
			}
			if _, err := io.Copy(f, resp.Body); err != nil {
				_ = f.Close()
				return fmt.Errorf("writing %s: %w", file, err)
			}
			return f.Close()
		}()
	}()
	return done
}
