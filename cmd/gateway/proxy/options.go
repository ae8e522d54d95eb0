// Package proxy is the pdgate dev gateway: an HTTP reverse proxy that is an ext_proc client
// of the EPP exactly as Envoy is (FULL_DUPLEX_STREAMED bodies in both directions). It stands
// in for Envoy in development and tests; production uses a real gateway.
package proxy

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/pflag"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Failure modes, named as Envoy's ext_proc failure_mode_allow and GIE's InferencePool
// failureMode.
const (
	FailClose = "close"
	FailOpen  = "open"
)

// Options configures the dev gateway.
type Options struct {
	// ListenAddr is the client-facing HTTP address.
	ListenAddr string
	// AdminAddr serves /healthz, /readyz and /metrics; empty disables it.
	AdminAddr string
	// Tracer records each request's gateway span (set by Run from the OTEL_* environment;
	// nil is tracing off).
	Tracer trace.Tracer
	// EPPAddr is the EPP's ext_proc gRPC address (host:port).
	EPPAddr string
	// EPPTLS dials the EPP with TLS (the EPP serves TLS by default, --secure-serving).
	EPPTLS bool
	// EPPInsecureSkipVerify accepts the EPP's self-signed certificate.
	EPPInsecureSkipVerify bool
	// EPPCAFile is a PEM bundle that verifies the EPP's certificate.
	EPPCAFile string
	// EPPServerName overrides the TLS server name.
	EPPServerName string
	// MessageTimeout bounds each wait for an EPP reply (Envoy's message_timeout).
	MessageTimeout time.Duration
	// ConnectTimeout bounds one upstream TCP connect; a failed connect falls through to the
	// next listed endpoint.
	ConnectTimeout time.Duration
	// ResponseHeaderTimeout bounds the wait for the upstream's response headers.
	ResponseHeaderTimeout time.Duration
	// RequestTimeout bounds the whole exchange, streamed response included.
	RequestTimeout time.Duration
	// FailureMode is FailClose (503 when the EPP fails) or FailOpen (forward the original
	// request to DefaultBackend).
	FailureMode string
	// DefaultBackend (host:port) receives requests when the EPP fails in FailOpen mode.
	DefaultBackend string
	// ChunkSize is the size of the request body frames sent to the EPP.
	ChunkSize int
	// MaxRequestBytes rejects larger request bodies with 413.
	MaxRequestBytes int64
	// Logger receives the gateway's logs; the zero value discards them.
	Logger logr.Logger
}

// DefaultOptions returns the defaults the binary's flags start from.
func DefaultOptions() Options {
	return Options{
		ListenAddr:            "127.0.0.1:8080",
		AdminAddr:             "127.0.0.1:8081",
		EPPAddr:               "127.0.0.1:9002",
		EPPTLS:                true,
		MessageTimeout:        30 * time.Second,
		ConnectTimeout:        2 * time.Second,
		ResponseHeaderTimeout: 5 * time.Minute,
		RequestTimeout:        10 * time.Minute,
		FailureMode:           FailClose,
		ChunkSize:             16 * 1024,
		MaxRequestBytes:       64 << 20,
	}
}

// BindFlags registers the options on fs.
func (o *Options) BindFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.ListenAddr, "listen", o.ListenAddr, "client-facing HTTP address")
	fs.StringVar(&o.AdminAddr, "admin-listen", o.AdminAddr, "address for /healthz, /readyz and /metrics (empty disables)")
	fs.StringVar(&o.EPPAddr, "epp", o.EPPAddr, "EPP ext_proc gRPC address (host:port)")
	fs.BoolVar(&o.EPPTLS, "epp-tls", o.EPPTLS, "dial the EPP with TLS (the EPP serves TLS by default)")
	fs.BoolVar(&o.EPPInsecureSkipVerify, "epp-insecure-skip-verify", o.EPPInsecureSkipVerify, "accept the EPP's self-signed certificate")
	fs.StringVar(&o.EPPCAFile, "epp-ca-file", o.EPPCAFile, "PEM bundle that verifies the EPP's certificate")
	fs.StringVar(&o.EPPServerName, "epp-server-name", o.EPPServerName, "TLS server name of the EPP")
	fs.DurationVar(&o.MessageTimeout, "epp-message-timeout", o.MessageTimeout, "bound on each wait for an EPP reply (Envoy's message_timeout)")
	fs.DurationVar(&o.ConnectTimeout, "upstream-connect-timeout", o.ConnectTimeout, "bound on one upstream connect; a failure falls through to the next listed endpoint")
	fs.DurationVar(&o.ResponseHeaderTimeout, "upstream-response-header-timeout", o.ResponseHeaderTimeout, "bound on the wait for upstream response headers")
	fs.DurationVar(&o.RequestTimeout, "request-timeout", o.RequestTimeout, "bound on the whole exchange, streamed response included")
	fs.StringVar(&o.FailureMode, "failure-mode", o.FailureMode, "what to do when the EPP fails: close (503) or open (forward to --default-backend)")
	fs.StringVar(&o.DefaultBackend, "default-backend", o.DefaultBackend, "host:port used in --failure-mode=open")
	fs.IntVar(&o.ChunkSize, "body-chunk-bytes", o.ChunkSize, "size of the request body frames streamed to the EPP")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest accepted request body")
}

// Validate reports every malformed option, naming the flag.
func (o *Options) Validate() error {
	var errs []error
	if o.ListenAddr == "" {
		errs = append(errs, errors.New("--listen: must not be empty"))
	}
	if _, err := protocol.ParseHostPort(o.EPPAddr); err != nil {
		errs = append(errs, fmt.Errorf("--epp: %w", err))
	}
	for name, d := range map[string]time.Duration{
		"--epp-message-timeout": o.MessageTimeout, "--upstream-connect-timeout": o.ConnectTimeout,
		"--upstream-response-header-timeout": o.ResponseHeaderTimeout, "--request-timeout": o.RequestTimeout,
	} {
		if d <= 0 {
			errs = append(errs, fmt.Errorf("%s: must be > 0, got %s", name, d))
		}
	}
	switch strings.ToLower(o.FailureMode) {
	case FailClose:
	case FailOpen:
		if _, err := protocol.ParseHostPort(o.DefaultBackend); err != nil {
			errs = append(errs, fmt.Errorf("--default-backend: required with --failure-mode=open: %w", err))
		}
	default:
		errs = append(errs, fmt.Errorf("--failure-mode: must be %q or %q, got %q", FailClose, FailOpen, o.FailureMode))
	}
	if o.ChunkSize < 1 {
		errs = append(errs, fmt.Errorf("--body-chunk-bytes: must be >= 1, got %d", o.ChunkSize))
	}
	if o.MaxRequestBytes < 1 {
		errs = append(errs, fmt.Errorf("--max-request-bytes: must be >= 1, got %d", o.MaxRequestBytes))
	}
	if o.EPPCAFile != "" && !o.EPPTLS {
		errs = append(errs, errors.New("--epp-ca-file: needs --epp-tls"))
	}
	return errors.Join(errs...)
}
