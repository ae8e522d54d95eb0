package proxy

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/pdgate/pdgate/cmd/internal/telemetry"
)

// DialEPP opens the gRPC connection to the EPP's ext_proc service.
func DialEPP(opts Options) (*grpc.ClientConn, error) {
	creds := insecure.NewCredentials()
	if opts.EPPTLS {
		cfg := &tls.Config{
			MinVersion:         tls.VersionTLS12,
			InsecureSkipVerify: opts.EPPInsecureSkipVerify, //nolint:gosec // an explicit flag for self-signed dev EPPs
			ServerName:         opts.EPPServerName,
		}
		if opts.EPPCAFile != "" {
			pem, err := os.ReadFile(opts.EPPCAFile)
			if err != nil {
				return nil, fmt.Errorf("--epp-ca-file: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("--epp-ca-file %s: no PEM certificate found", opts.EPPCAFile)
			}
			cfg.RootCAs = pool
		}
		creds = credentials.NewTLS(cfg)
	}
	conn, err := grpc.NewClient(opts.EPPAddr, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("dialing the EPP at %s: %w", opts.EPPAddr, err)
	}
	return conn, nil
}

// Run serves the gateway until ctx ends, then shuts down gracefully (in-flight requests get
// a few seconds to finish).
func Run(ctx context.Context, opts Options) error {
	if err := opts.Validate(); err != nil {
		return err
	}
	conn, err := DialEPP(opts)
	if err != nil {
		return err
	}
	defer conn.Close()
	// Spans only when the OTEL_* environment names a collector (cmd/internal/telemetry).
	tracing, err := telemetry.Start(ctx, true, "pdgate/gateway", "pdgate/gateway")
	if err != nil {
		return err
	}
	defer func() {
		if err := tracing.Close(5 * time.Second); err != nil {
			opts.Logger.Error(err, "flushing spans")
		}
	}()
	opts.Tracer = tracing.Tracer()
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	gw := New(opts, extprocv3.NewExternalProcessorClient(conn), newGatewayMetrics(reg))

	ln, err := net.Listen("tcp", opts.ListenAddr)
	if err != nil {
		return fmt.Errorf("--listen %s: %w", opts.ListenAddr, err)
	}
	servers := []*http.Server{{Handler: gw, ReadHeaderTimeout: 30 * time.Second}}
	listeners := []net.Listener{ln}
	if opts.AdminAddr != "" {
		aln, err := net.Listen("tcp", opts.AdminAddr)
		if err != nil {
			ln.Close()
			return fmt.Errorf("--admin-listen %s: %w", opts.AdminAddr, err)
		}
		servers = append(servers, &http.Server{Handler: adminMux(conn, reg), ReadHeaderTimeout: 10 * time.Second})
		listeners = append(listeners, aln)
	}
	opts.Logger.Info("dev gateway serving (stands in for Envoy; use a real gateway in production)",
		"listen", ln.Addr().String(), "epp", opts.EPPAddr, "tls", opts.EPPTLS, "failureMode", opts.FailureMode)

	errc := make(chan error, len(servers))
	for i := range servers {
		go func(s *http.Server, l net.Listener) {
			if err := s.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
				errc <- err
			}
		}(servers[i], listeners[i])
	}
	select {
	case <-ctx.Done():
	case err := <-errc:
		shutdown(servers)
		return fmt.Errorf("serving: %w", err)
	}
	shutdown(servers)
	return nil
}

func shutdown(servers []*http.Server) {
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, s := range servers {
		if err := s.Shutdown(sctx); err != nil {
			_ = s.Close()
		}
	}
}

func adminMux(conn *grpc.ClientConn, reg *prometheus.Registry) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	// readyz: ready once the gRPC connection to the EPP is up (TLS handshake included).
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		conn.Connect()
		ctx, cancel := context.WithTimeout(r.Context(), time.Second)
		defer cancel()
		for st := conn.GetState(); st != connectivity.Ready; st = conn.GetState() {
			if !conn.WaitForStateChange(ctx, st) {
				http.Error(w, "EPP connection "+conn.GetState().String(), http.StatusServiceUnavailable)
				return
			}
		}
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
