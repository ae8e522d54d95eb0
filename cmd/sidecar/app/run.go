package app

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
	"github.com/pdgate/pdgate/cmd/sidecar/proxy"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// MetricsPath serves the sidecar's own metrics on the main listener; every other path that
// is not an inference route goes to the engine (including the engine's /metrics).
const MetricsPath = "/sidecar/metrics"

// HealthPath answers 200 while the sidecar itself is serving.
const HealthPath = "/sidecar/healthz"

// Run serves until ctx ends, then shuts down gracefully (in-flight streams get
// --shutdown-timeout to finish).
func Run(ctx context.Context, o *Options) error {
	if err := o.Validate(); err != nil {
		return err
	}
	log := o.Logger
	for _, w := range o.warnings {
		log.Info("WARNING: sidecar setting ignored", "detail", w)
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))

	checker, err := buildAllowlist(ctx, o, log)
	if err != nil {
		return err
	}
	metrics := proxy.NewMetrics(reg)
	if o.AIBrixMetrics {
		metrics.WithAIBrixNames(reg)
	}
	cfg, err := o.proxyConfig(log, checker, metrics)
	if err != nil {
		return err
	}
	// Spans only when the OTEL_* environment names a collector (cmd/internal/telemetry).
	tracing, err := telemetry.Start(ctx, true, "pdgate/sidecar", "pdgate/sidecar")
	if err != nil {
		return err
	}
	defer func() {
		if err := tracing.Close(5 * time.Second); err != nil {
			log.Error(err, "flushing spans")
		}
	}()
	cfg.Tracer = tracing.Tracer()
	px, err := proxy.New(cfg)
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	metricsHandler := promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	mux.Handle(MetricsPath, metricsHandler)
	mux.HandleFunc(HealthPath, func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.Handle("/", px)

	srv := &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: o.ReadHeaderTimeout,
		IdleTimeout:       o.IdleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          nil,
	}
	ln, err := net.Listen("tcp", o.Listen)
	if err != nil {
		return fmt.Errorf("listen %s: %w", o.Listen, err)
	}
	if tlsCfg, err := o.serverTLS(); err != nil {
		_ = ln.Close()
		return err
	} else if tlsCfg != nil {
		ln = tls.NewListener(ln, tlsCfg)
	}
	var metricsSrv *http.Server
	if o.MetricsListen != "" {
		mln, err := net.Listen("tcp", o.MetricsListen)
		if err != nil {
			_ = ln.Close()
			return fmt.Errorf("listen %s: %w", o.MetricsListen, err)
		}
		mm := http.NewServeMux()
		mm.Handle("/metrics", metricsHandler)
		metricsSrv = &http.Server{Handler: mm, ReadHeaderTimeout: o.ReadHeaderTimeout}
		go func() { _ = metricsSrv.Serve(mln) }()
	}
	log.Info("sidecar listening", "addr", ln.Addr().String(), "engine", o.Engine, "engineURL", o.EngineURL,
		"kvConnector", o.KVConnector, "prefillFailurePolicy", o.FailurePolicy)
	if o.Engine == string(proxy.EngineTRTLLM) {
		log.Info("TensorRT-LLM request ids", "machineID", o.trtMachineID, "slots", o.TRTMachineIDSlots, "pod", o.PodName)
	}
	if o.OnListening != nil {
		o.OnListening(ln.Addr().String())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	select {
	case err := <-errc:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	log.Info("shutting down; finishing in-flight requests", "timeout", o.ShutdownTimeout.String())
	sctx, cancel := context.WithTimeout(context.Background(), o.ShutdownTimeout)
	defer cancel()
	if metricsSrv != nil {
		_ = metricsSrv.Shutdown(sctx)
	}
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("graceful shutdown: %w", err)
	}
	return nil
}

func buildAllowlist(ctx context.Context, o *Options, log logr.Logger) (allowlist.Checker, error) {
	switch {
	case o.AllowlistDisable:
		log.Info("WARNING: the allow-list is DISABLED; any client that can set x-prefiller-host-port or x-encoder-hosts-ports can make this sidecar send requests to any host (SSRF). Use only on an isolated test network.")
		return allowlist.AllowAll{}, nil
	case o.InferencePool != "":
		ns, name, err := allowlist.ParsePoolRef(o.InferencePool)
		if err != nil {
			return nil, err
		}
		rc, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("kubernetes config: %w", err)
		}
		kc, err := kubernetes.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes client: %w", err)
		}
		dc, err := dynamic.NewForConfig(rc)
		if err != nil {
			return nil, fmt.Errorf("kubernetes dynamic client: %w", err)
		}
		k := allowlist.NewKube(kc, dc, ns, name, log.WithName("allowlist"))
		sctx, cancel := context.WithTimeout(ctx, time.Minute)
		defer cancel()
		if err := k.Start(ctx, sctx); err != nil {
			return nil, err
		}
		log.Info("allow-list follows an InferencePool", "pool", ns+"/"+name)
		return k, nil
	}
	var list []protocol.HostPort
	if o.Allowlist != "" {
		l, err := allowlist.ParseList(o.Allowlist)
		if err != nil {
			return nil, fmt.Errorf("--allowlist: %w", err)
		}
		list = append(list, l...)
	}
	if o.AllowlistFile != "" {
		l, err := allowlist.LoadFile(o.AllowlistFile)
		if err != nil {
			return nil, fmt.Errorf("--allowlist-file: %w", err)
		}
		list = append(list, l...)
	}
	s := allowlist.NewStatic(list)
	log.Info("static allow-list", "entries", s.Len())
	return s, nil
}

func (o *Options) proxyConfig(log logr.Logger, checker allowlist.Checker, m *proxy.Metrics) (proxy.Config, error) {
	u, err := url.Parse(o.EngineURL)
	if err != nil {
		return proxy.Config{}, fmt.Errorf("--engine-url: %w", err)
	}
	tlsStages, _ := parseStages(o.EnableTLS)
	skip, _ := parseStages(o.TLSInsecureSkipVerify)
	var roots *x509.CertPool
	if o.TLSCAFile != "" {
		pem, err := os.ReadFile(o.TLSCAFile)
		if err != nil {
			return proxy.Config{}, fmt.Errorf("--tls-ca-file: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pem) {
			return proxy.Config{}, errors.New("--tls-ca-file: no certificates found")
		}
	}
	client := func(stage string) *http.Client {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil // pod-to-pod traffic never goes through an environment proxy
		tr.MaxIdleConns = 0
		tr.MaxIdleConnsPerHost = o.MaxIdleConnsPerHost
		tr.IdleConnTimeout = 90 * time.Second
		tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: roots, InsecureSkipVerify: skip[stage]} //nolint:gosec // opt-in per stage
		return &http.Client{
			Transport:     tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		}
	}
	if tlsStages["decoder"] && u.Scheme == "http" {
		u.Scheme = "https"
	}
	scheme := func(stage string) string {
		if tlsStages[stage] {
			return "https"
		}
		return "http"
	}
	return proxy.Config{
		Engine: proxy.Engine(o.Engine), EngineURL: u, KVConnector: proxy.Connector(o.KVConnector),
		TRTSchedule: proxy.ScheduleStyle(o.TRTSchedule), TRTMachineID: o.trtMachineID,
		SGLangBootstrapPort: o.BootstrapPort,
		PrefillTimeout:      o.PrefillTimeout, FailurePolicy: proxy.FailurePolicy(o.FailurePolicy),
		PrefillMaxRetries: o.PrefillMaxRetries, PrefillRetryBackoff: o.PrefillRetryBackoff, SkipPrefillRetryOnce: !o.PrefillRetryOnce,
		EncodeTimeout: o.EncodeTimeout, AbortTimeout: o.AbortTimeout, AbortRetryDelay: o.AbortRetryDelay,
		PrefillReleaseTimeout: o.PrefillReleaseTimeout,
		FirstResponseTimeout:  o.FirstResponseTimeout, ResponseTimeout: o.ResponseTimeout,
		StreamIdleTimeout: o.StreamIdleTimeout, MaxRequestBytes: o.MaxRequestBytes,
		PrefillScheme: scheme("prefiller"), EncodeScheme: scheme("encoder"),
		PrefillClient: client("prefiller"), DecodeClient: client("decoder"), EncodeClient: client("encoder"),
		Allow: checker, Metrics: m, Log: log,
		DataParallel: proxy.DataParallel{Size: o.DataParallelSize, ListenPort: listenPort(o.Listen), SideChannelStride: o.KVSideChannelPortStride},
	}, nil
}

// listenPort is the port of a --listen address (0 when it has none).
func listenPort(addr string) int {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return 0
	}
	n, _ := strconv.Atoi(port)
	return n
}
