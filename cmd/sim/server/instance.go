package server

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
)

// Instance is one running simulated model server.
type Instance struct {
	opts     Options
	prof     *costmodel.Profile
	clock    batching.Clock
	sched    *batching.Scheduler
	cache    *kvcache.PrefixCache
	store    *handoffStore
	storage  *sharedStorage
	kv       *kvPublisher
	ec       *ecCache
	m        *simMetrics
	log      logr.Logger
	client   *http.Client
	engineID string

	blockSeq    atomic.Int64
	reqSeq      atomic.Uint64
	pullWaiting atomic.Int64

	rngMu sync.Mutex
	rng   *rand.Rand

	ridMu sync.Mutex
	rids  map[uint64]ridEntry

	ln, bootLn   net.Listener
	srv, bootSrv *http.Server
	wg           sync.WaitGroup
	closeOnce    sync.Once
}

type ridEntry struct {
	rid    string
	cancel context.CancelCauseFunc
}

// Start validates opts, listens and serves in the background until Close.
func Start(ctx context.Context, opts Options) (*Instance, error) {
	prof, err := opts.complete()
	if err != nil {
		return nil, fmt.Errorf("sim %s: %w", opts.Name, err)
	}
	in := &Instance{opts: opts, prof: prof, log: opts.Logger.WithValues("sim", opts.Name),
		rids: map[uint64]ridEntry{}, rng: rand.New(rand.NewPCG(opts.Seed, 0x5eed))}
	in.clock = opts.Clock
	if in.clock == nil {
		in.clock = batching.NewScaledClock(opts.TimeScale)
	}
	in.m = newSimMetrics(in)
	policy, _ := batching.ParsePolicy(opts.KVFullPolicy)
	in.sched, err = batching.New(batching.Config{Profile: prof, Clock: in.clock, MaxBatch: prof.MaxBatch,
		KVCapacityTokens: prof.KVCapacityTokens, ChunkedPrefillTokens: prof.ChunkedPrefillTokens, Policy: policy, Observer: in.m})
	if err != nil {
		return nil, fmt.Errorf("sim %s: %w", opts.Name, err)
	}
	in.cache = kvcache.NewPrefixCache(prof.KVCapacityTokens / prof.BlockSize)
	in.store = newHandoffStore(in.clock, opts.KVTTL.Duration)
	in.ec = newECCache(opts.SharedStorageDir)
	if opts.KVConnector == ConnectorSharedStorage {
		if in.storage, err = newSharedStorage(opts.SharedStorageDir, in.clock, opts.KVTTL.Duration); err != nil {
			return nil, fmt.Errorf("sim %s: %w", opts.Name, err)
		}
	}
	in.client = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64, IdleConnTimeout: 90 * time.Second}}

	lc := net.ListenConfig{}
	in.ln, err = lc.Listen(ctx, "tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
	if err != nil {
		return nil, fmt.Errorf("sim %s: listen: %w", opts.Name, err)
	}
	in.opts.Port = in.ln.Addr().(*net.TCPAddr).Port
	in.engineID = fmt.Sprintf("sim-%s-%s-%d", opts.Dialect, opts.AdvertiseHost, in.opts.Port)
	if in.kv, err = newKVPublisher(in); err != nil {
		_ = in.ln.Close()
		return nil, fmt.Errorf("sim %s: %w", opts.Name, err)
	}
	in.srv = &http.Server{Handler: in.withDPRank(in.routes()), ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 300 * time.Second}
	in.serve(in.srv, in.ln)

	if opts.Dialect == DialectSGLang && opts.Role == RolePrefill {
		in.bootLn, err = lc.Listen(ctx, "tcp", net.JoinHostPort(opts.Host, strconv.Itoa(opts.BootstrapPort)))
		if err != nil {
			in.Close()
			return nil, fmt.Errorf("sim %s: bootstrap listen: %w", opts.Name, err)
		}
		in.opts.BootstrapPort = in.bootLn.Addr().(*net.TCPAddr).Port
		in.bootSrv = &http.Server{Handler: in.bootstrapRoutes(), ReadHeaderTimeout: 30 * time.Second}
		in.serve(in.bootSrv, in.bootLn)
	}
	in.log.Info("simulator listening", "addr", in.Addr(), "dialect", opts.Dialect, "role", opts.Role,
		"connector", opts.KVConnector, "profile", prof.Name, "timeScale", opts.TimeScale, "bootstrap", in.BootstrapAddr())
	return in, nil
}

func (in *Instance) serve(s *http.Server, ln net.Listener) {
	in.wg.Add(1)
	go func() {
		defer in.wg.Done()
		if err := s.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			in.log.Error(err, "serve")
		}
	}()
}

// Addr is the host:port the API listens on.
func (in *Instance) Addr() string { return in.ln.Addr().String() }

// BootstrapAddr is the SGLang bootstrap listener's host:port ("" when none).
func (in *Instance) BootstrapAddr() string {
	if in.bootLn == nil {
		return ""
	}
	return in.bootLn.Addr().String()
}

// Options returns the completed options (ports resolved).
func (in *Instance) Options() Options { return in.opts }

func (in *Instance) advertised() string {
	return net.JoinHostPort(in.opts.AdvertiseHost, strconv.Itoa(in.opts.Port))
}

// Close stops listening, fails requests in flight and waits for the servers to stop.
func (in *Instance) Close() {
	in.closeOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		if in.sched != nil {
			in.sched.Close()
		}
		for _, s := range []*http.Server{in.srv, in.bootSrv} {
			if s != nil {
				if err := s.Shutdown(ctx); err != nil {
					_ = s.Close()
				}
			}
		}
		in.wg.Wait()
		in.kv.close()
		in.client.CloseIdleConnections()
	})
}

// Run serves one instance until ctx ends.
func Run(ctx context.Context, opts Options) error {
	return RunMany(ctx, []Options{opts})
}

// RunMany serves every instance in this process until ctx ends. If one fails to start,
// those already started are closed and the error is returned.
func RunMany(ctx context.Context, all []Options) error {
	var started []*Instance
	defer func() {
		for _, in := range started {
			in.Close()
		}
	}()
	for i, o := range all {
		in, err := Start(ctx, o)
		if err != nil {
			return fmt.Errorf("instance %d: %w", i, err)
		}
		started = append(started, in)
	}
	<-ctx.Done()
	return nil
}

// sleep waits d of model time; false when ctx ended first.
func (in *Instance) sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	done := make(chan struct{})
	t := in.clock.AfterFunc(d, func() { close(done) })
	select {
	case <-done:
		return true
	case <-ctx.Done():
		t.Stop()
		return false
	}
}

func (in *Instance) chance(p float64) bool {
	if p <= 0 {
		return false
	}
	in.rngMu.Lock()
	defer in.rngMu.Unlock()
	return in.rng.Float64() < p
}

func (in *Instance) routes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", in.handleGenerate(apiChat))
	mux.HandleFunc("POST /v1/completions", in.handleGenerate(apiCompletions))
	mux.HandleFunc("POST /v1/responses", in.handleGenerate(apiResponses))
	mux.HandleFunc("GET /v1/models", in.handleModels)
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("GET /metrics", in.m.handler())
	mux.HandleFunc("POST /internal/kv/pull", in.handlePull)
	switch in.opts.Dialect {
	case DialectVLLM:
		mux.HandleFunc("POST /v1/completions/render", in.handleRender(apiCompletions))
		mux.HandleFunc("POST /v1/chat/completions/render", in.handleRender(apiChat))
	case DialectSGLang:
		mux.HandleFunc("POST /abort_request", in.handleAbort)
		mux.HandleFunc("GET /get_server_info", in.handleSGLangServerInfo)
	case DialectTRTLLM:
		mux.HandleFunc("GET /server_info", in.handleServerInfo)
	}
	return mux
}

func (in *Instance) bootstrapRoutes() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("POST /internal/kv/pull", in.handlePull)
	return mux
}
