package runner

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"github.com/pdgate/pdgate/cmd/internal/grpcserver"
	"github.com/pdgate/pdgate/cmd/internal/selfsigned"
	"net"
	"net/http"
	"net/http/pprof"
	"strconv"
	"sync/atomic"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthPb "google.golang.org/grpc/health/grpc_health_v1"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/common"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"

	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// listen opens a TCP listener on all interfaces (GIE binds ":port"); port 0 picks a free one.
func listen(port int) (net.Listener, error) {
	l, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, fmt.Errorf("listening on port %d: %w", port, err)
	}
	return l, nil
}

// newExtProcServer builds the ext_proc gRPC server with GIE's TLS behaviour: self-signed by
// default with --secure-serving, the --cert-path pair otherwise, reloaded on change with
// --enable-cert-reload.
func newExtProcServer(ctx context.Context, o *Options, srv extProcPb.ExternalProcessorServer, logger logr.Logger) (*grpc.Server, error) {
	opts := grpcserver.ExtProcOptions()
	if o.SecureServing {
		var (
			cert tls.Certificate
			err  error
		)
		if o.CertPath != "" {
			cert, err = tls.LoadX509KeyPair(o.CertPath+"/tls.crt", o.CertPath+"/tls.key")
		} else {
			cert, err = selfsigned.Certificate("pdgate-epp")
		}
		if err != nil {
			return nil, fmt.Errorf("TLS certificate: %w", err)
		}
		tlsCfg := &tls.Config{Certificates: []tls.Certificate{cert}, NextProtos: []string{"h2"}, MinVersion: tls.VersionTLS12}
		if o.CertPath != "" && o.EnableCertReload {
			reloader, err := common.NewCertReloader(ctx, o.CertPath, &cert)
			if err != nil {
				return nil, fmt.Errorf("cert reloader: %w", err)
			}
			tlsCfg = &tls.Config{
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return reloader.Get(), nil },
				NextProtos:     []string{"h2"},
				MinVersion:     tls.VersionTLS12,
			}
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsCfg)))
	}
	s := grpc.NewServer(opts...)
	extProcPb.RegisterExternalProcessorServer(s, srv)
	if o.HealthChecking {
		hs := health.NewServer()
		hs.SetServingStatus(extProcPb.ExternalProcessor_ServiceDesc.ServiceName, healthPb.HealthCheckResponse_SERVING)
		healthPb.RegisterHealthServer(s, hs)
	}
	logger.V(1).Info("ext_proc server built", "secure", o.SecureServing, "certPath", o.CertPath)
	return s, nil
}

// serveGRPC serves until ctx ends, then stops gracefully (bounded).
func serveGRPC(ctx context.Context, s *grpc.Server, l net.Listener) error {
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
		done := make(chan struct{})
		go func() { s.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			s.Stop()
		}
		return nil
	}
}

// metricsHandler serves controller-runtime's registry (GIE's and pdgate's EPP metrics), the
// prefill-release callback when enabled, and, when enabled, pprof. Profiling rates are left at
// Go's defaults: GIE's helper sets block and mutex profiling to every event, which costs the
// request path.
func metricsHandler(enablePprof bool, release *prefillrelease.Callback) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(crmetrics.Registry, promhttp.HandlerOpts{}))
	if release != nil {
		mux.Handle(protocol.PrefillReleasePath, release)
	}
	if enablePprof {
		addPprof(mux.Handle)
	}
	return mux
}

// exceptPrefillRelease wraps the metrics server's authentication filter (Kubernetes mode,
// --metrics-endpoint-auth) so that the prefill-release callback bypasses it: sidecars hold no
// token the TokenReview would accept, and the callback authenticates itself (an HMAC under a
// per-process key). Every other path stays filtered.
func exceptPrefillRelease(inner metricsserver.Filter) metricsserver.Filter {
	return func(log logr.Logger, h http.Handler) (http.Handler, error) {
		filtered, err := inner(log, h)
		if err != nil {
			return nil, err
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == protocol.PrefillReleasePath {
				h.ServeHTTP(w, r)
				return
			}
			filtered.ServeHTTP(w, r)
		}), nil
	}
}

func addPprof(handle func(string, http.Handler)) {
	handle("/debug/pprof/", http.HandlerFunc(pprof.Index))
	handle("/debug/pprof/cmdline", http.HandlerFunc(pprof.Cmdline))
	handle("/debug/pprof/profile", http.HandlerFunc(pprof.Profile))
	handle("/debug/pprof/symbol", http.HandlerFunc(pprof.Symbol))
	handle("/debug/pprof/trace", http.HandlerFunc(pprof.Trace))
}

func serveHTTP(ctx context.Context, h http.Handler, l net.Listener) error {
	s := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	errc := make(chan error, 1)
	go func() { errc <- s.Serve(l) }()
	select {
	case err := <-errc:
		if errors.Is(err, http.ErrServerClosed) {
			return nil
		}
		return err
	case <-ctx.Done():
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return s.Shutdown(sctx)
	}
}

// healthServer answers gRPC health checks with GIE's semantics: without leader election every
// service is SERVING iff the pool has synced; with it, liveness is always SERVING and
// readiness, "" and the ext_proc service need synced and leader.
type healthServer struct {
	healthPb.UnimplementedHealthServer
	synced         func() bool
	isLeader       *atomic.Bool
	leaderElection bool
	logger         logr.Logger
}

const (
	livenessService  = "liveness"
	readinessService = "readiness"
)

func (h *healthServer) Check(_ context.Context, in *healthPb.HealthCheckRequest) (*healthPb.HealthCheckResponse, error) {
	serving := func(ok bool) *healthPb.HealthCheckResponse {
		if ok {
			return &healthPb.HealthCheckResponse{Status: healthPb.HealthCheckResponse_SERVING}
		}
		h.logger.V(logutil.DEBUG).Info("gRPC health check not serving", "service", in.Service)
		return &healthPb.HealthCheckResponse{Status: healthPb.HealthCheckResponse_NOT_SERVING}
	}
	synced := h.synced()
	if !h.leaderElection {
		return serving(synced), nil
	}
	switch in.Service {
	case livenessService:
		return serving(true), nil
	case readinessService, "", extProcPb.ExternalProcessor_ServiceDesc.ServiceName:
		return serving(synced && h.isLeader.Load()), nil
	default:
		return &healthPb.HealthCheckResponse{Status: healthPb.HealthCheckResponse_SERVICE_UNKNOWN}, nil
	}
}

func (h *healthServer) List(ctx context.Context, _ *healthPb.HealthListRequest) (*healthPb.HealthListResponse, error) {
	services := []string{extProcPb.ExternalProcessor_ServiceDesc.ServiceName}
	if h.leaderElection {
		services = append(services, livenessService, readinessService)
	}
	out := &healthPb.HealthListResponse{Statuses: map[string]*healthPb.HealthCheckResponse{}}
	for _, s := range services {
		r, _ := h.Check(ctx, &healthPb.HealthCheckRequest{Service: s})
		out.Statuses[s] = r
	}
	return out, nil
}

func newHealthGRPC(h *healthServer) *grpc.Server {
	s := grpc.NewServer()
	healthPb.RegisterHealthServer(s, h)
	return s
}
