// Package proxy is the routing sidecar's request path: it reads the EPP's routing headers,
// checks prefill and encode targets against the allow-list, runs the encode and prefill legs
// in the wire dialect of the decode engine (vLLM, SGLang, TensorRT-LLM), hands the request to
// the local decode engine and streams its answer back under a watchdog.
package proxy

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"

	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
)

// Engine is the decode engine's wire dialect.
type Engine string

// Engines.
const (
	EngineVLLM   Engine = "vllm"
	EngineSGLang Engine = "sglang"
	EngineTRTLLM Engine = "trtllm"
)

// Engines lists every engine value (for --help and validation).
var Engines = []Engine{EngineVLLM, EngineSGLang, EngineTRTLLM}

// Connector is the vLLM KV connector protocol.
type Connector string

// KV connectors.
const (
	// ConnectorNIXLv2 is llm-d's nixlv2: kv_transfer_params returned by the prefiller are
	// passed verbatim to decode.
	ConnectorNIXLv2 Connector = "nixlv2"
	// ConnectorSHFS is AIBrix's default: as nixlv2, with remote_host set to the prefill pod.
	ConnectorSHFS Connector = "shfs"
	// ConnectorNeuronNIXL is AIBrix's "nixl" (Neuron): decode gets disagg_prefill_resp = the
	// whole prefill response.
	ConnectorNeuronNIXL Connector = "nixl"
	// ConnectorSharedStorage is llm-d's LMCache-style shared storage: decode first with
	// cache_hit_threshold, prefill only when decode answers finish_reason cache_threshold.
	ConnectorSharedStorage Connector = "shared-storage"
)

// Connectors lists every connector value.
var Connectors = []Connector{ConnectorNIXLv2, ConnectorSHFS, ConnectorNeuronNIXL, ConnectorSharedStorage}

// ScheduleStyle is the TensorRT-LLM disaggregated schedule style.
type ScheduleStyle string

// Schedule styles.
const (
	ContextFirst    ScheduleStyle = "context_first"
	GenerationFirst ScheduleStyle = "generation_first"
)

// ScheduleStyles lists every schedule style value.
var ScheduleStyles = []ScheduleStyle{ContextFirst, GenerationFirst}

// FailurePolicy chooses what a failed prefill leg does to the request.
type FailurePolicy string

// Failure policies.
const (
	FailFast      FailurePolicy = "fail-fast"
	Retry         FailurePolicy = "retry"
	FallbackLocal FailurePolicy = "fallback-local"
)

// FailurePolicies lists every policy value.
var FailurePolicies = []FailurePolicy{FailFast, Retry, FallbackLocal}

// Config is everything the request path needs. Clients must be set; the app package builds
// them from the TLS flags.
type Config struct {
	// Tracer records each request's sidecar spans (cmd/internal/telemetry); nil is tracing off.
	Tracer       trace.Tracer
	Engine       Engine
	EngineURL    *url.URL
	KVConnector  Connector
	TRTSchedule  ScheduleStyle
	TRTMachineID int
	// SGLangBootstrapPort is used when the EPP sends no x-pdgate-prefiller-bootstrap-port.
	SGLangBootstrapPort int

	PrefillTimeout      time.Duration
	FailurePolicy       FailurePolicy
	PrefillMaxRetries   int
	PrefillRetryBackoff time.Duration
	// SkipPrefillRetryOnce turns off the one retry every policy makes on a retryable prefill
	// failure (on the EPP's alternate prefill pod when named, else the same pod). The zero
	// value retries: silent degradation starts with a single dropped connection otherwise.
	SkipPrefillRetryOnce bool
	// uncheckedHandoff turns the handoff checks (checks.go) off: the benchmark's baseline.
	uncheckedHandoff bool
	EncodeTimeout    time.Duration

	AbortTimeout    time.Duration
	AbortRetryDelay time.Duration

	FirstResponseTimeout time.Duration
	ResponseTimeout      time.Duration
	StreamIdleTimeout    time.Duration

	ServerInfoTimeout time.Duration
	ServerInfoTTL     time.Duration

	MaxRequestBytes int64

	// PrefillReleaseTimeout bounds the background POST to the EPP's prefill-release callback
	// (x-pdgate-prefill-release) made when a prefill leg returns; 0 disables the callback.
	PrefillReleaseTimeout time.Duration
	// PrefillReleaseClient makes that POST (default: no proxy, no redirects).
	PrefillReleaseClient *http.Client

	// PrefillScheme and EncodeScheme are "http" or "https" (per-stage TLS).
	PrefillScheme, EncodeScheme string
	PrefillClient, DecodeClient *http.Client
	EncodeClient                *http.Client

	// DataParallel: the local decode engine's data-parallel ranks (dataparallel.go).
	DataParallel DataParallel

	Allow   allowlist.Checker
	Metrics *Metrics
	Log     logr.Logger
}

// Validate checks the configuration; messages name the flag.
func (c *Config) Validate() error {
	if !oneOf(c.Engine, Engines) {
		return fmt.Errorf("--engine %q: must be one of %s", c.Engine, join(Engines))
	}
	if !oneOf(c.KVConnector, Connectors) {
		return fmt.Errorf("--kv-connector %q: must be one of %s", c.KVConnector, join(Connectors))
	}
	if !oneOf(c.TRTSchedule, ScheduleStyles) {
		return fmt.Errorf("--trt-schedule-style %q: must be one of %s", c.TRTSchedule, join(ScheduleStyles))
	}
	if c.DataParallel.Size < 0 || c.DataParallel.Size > 1024 {
		return fmt.Errorf("--data-parallel-size %d: must be in 1..1024", c.DataParallel.Size)
	}
	if c.DataParallel.SideChannelStride < 0 {
		return fmt.Errorf("--kv-side-channel-port-stride %d: must be >= 0", c.DataParallel.SideChannelStride)
	}
	if !oneOf(c.FailurePolicy, FailurePolicies) {
		return fmt.Errorf("--prefill-failure-policy %q: must be one of %s", c.FailurePolicy, join(FailurePolicies))
	}
	if c.EngineURL == nil || (c.EngineURL.Scheme != "http" && c.EngineURL.Scheme != "https") || c.EngineURL.Host == "" {
		return fmt.Errorf("--engine-url: want http(s)://host:port")
	}
	if c.TRTMachineID < 0 || c.TRTMachineID >= 1024 {
		return fmt.Errorf("--trt-machine-id %d: must be in [0,1024)", c.TRTMachineID)
	}
	if c.SGLangBootstrapPort < 1 || c.SGLangBootstrapPort > 65535 {
		return fmt.Errorf("--sglang-bootstrap-port %d: must be in 1..65535", c.SGLangBootstrapPort)
	}
	if c.PrefillTimeout <= 0 {
		return fmt.Errorf("--prefill-timeout must be > 0")
	}
	if c.EncodeTimeout <= 0 {
		return fmt.Errorf("--encode-timeout must be > 0")
	}
	if c.PrefillMaxRetries < 0 || c.PrefillMaxRetries > 10 {
		return fmt.Errorf("--prefill-max-retries %d: must be in 0..10", c.PrefillMaxRetries)
	}
	for name, d := range map[string]time.Duration{
		"--prefill-retry-backoff": c.PrefillRetryBackoff, "--decode-abort-timeout": c.AbortTimeout,
		"--decode-abort-retry-delay": c.AbortRetryDelay, "--decode-first-response-timeout": c.FirstResponseTimeout,
		"--decode-response-timeout": c.ResponseTimeout, "--decode-stream-idle-timeout": c.StreamIdleTimeout,
	} {
		if d < 0 {
			return fmt.Errorf("%s must be >= 0 (0 disables)", name)
		}
	}
	if c.PrefillReleaseTimeout < 0 {
		return fmt.Errorf("--prefill-release-timeout must be >= 0 (0 disables the callback)")
	}
	if c.MaxRequestBytes <= 0 {
		return fmt.Errorf("--max-request-bytes must be > 0")
	}
	if c.Allow == nil || c.PrefillClient == nil || c.DecodeClient == nil || c.EncodeClient == nil || c.Metrics == nil {
		return fmt.Errorf("proxy config: allow-list, clients and metrics are required")
	}
	return nil
}

func (c *Config) withDefaults() {
	if c.PrefillScheme == "" {
		c.PrefillScheme = "http"
	}
	if c.EncodeScheme == "" {
		c.EncodeScheme = "http"
	}
	if c.ServerInfoTimeout == 0 {
		c.ServerInfoTimeout = 3 * time.Second
	}
	if c.ServerInfoTTL == 0 {
		c.ServerInfoTTL = time.Minute
	}
	if c.PrefillReleaseClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.Proxy = nil
		c.PrefillReleaseClient = &http.Client{Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	}
}

func oneOf[T ~string](v T, all []T) bool {
	for _, a := range all {
		if a == v {
			return true
		}
	}
	return false
}

func join[T ~string](all []T) string {
	s := make([]string, len(all))
	for i, a := range all {
		s[i] = string(a)
	}
	return strings.Join(s, ", ")
}

// Join formats a value list for --help.
func Join[T ~string](all []T) string { return join(all) }
