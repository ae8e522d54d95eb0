// Package app wires the routing sidecar: flags (with AIBRIX_* variables read as defaults),
// allow-list, outgoing clients per stage, the listener with TLS and graceful shutdown.
package app

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/sidecar/proxy"
)

// Options are the sidecar's settings; NewOptions fills in defaults (and environment).
type Options struct {
	Listen    string
	EngineURL string
	// DataParallelSize and KVSideChannelPortStride: the local engine's DP ranks.
	DataParallelSize        int
	KVSideChannelPortStride int
	Engine                  string
	KVConnector             string
	TRTSchedule             string
	TRTMachineID            int
	// TRTMachineIDSlots > 0: TRTMachineID is the first of this many ids reserved for the
	// pod's StatefulSet, and the pod takes TRTMachineID + its ordinal (read from PodName).
	TRTMachineIDSlots int
	// PodName is the pod's name (env POD_NAME), for TRTMachineIDSlots.
	PodName       string
	BootstrapPort int

	PrefillTimeout      time.Duration
	FailurePolicy       string
	PrefillMaxRetries   int
	PrefillRetryBackoff time.Duration
	EncodeTimeout       time.Duration
	// PrefillReleaseTimeout bounds the callback telling the EPP a prefill leg returned.
	PrefillReleaseTimeout time.Duration

	AbortTimeout         time.Duration
	AbortRetryDelay      time.Duration
	FirstResponseTimeout time.Duration
	ResponseTimeout      time.Duration
	StreamIdleTimeout    time.Duration

	Allowlist        string
	AllowlistFile    string
	AllowlistDisable bool
	InferencePool    string
	Kubeconfig       string

	TLSCertFile, TLSKeyFile string
	TLSSelfSigned           bool
	EnableTLS               string // stages: prefiller,decoder,encoder
	TLSInsecureSkipVerify   string // stages
	TLSCAFile               string

	ReadHeaderTimeout   time.Duration
	IdleTimeout         time.Duration
	ShutdownTimeout     time.Duration
	MaxRequestBytes     int64
	MaxIdleConnsPerHost int
	MetricsListen       string

	// Logger overrides the zap logger built from flags (tests, the lab).
	Logger logr.Logger
	// OnListening is called with the bound listener address once the sidecar accepts
	// connections (tests and the lab use port 0).
	OnListening func(addr string)

	// PrefillRetryOnce retries a retryable prefill failure once (on the EPP's alternate
	// prefill pod when named) before the failure policy applies.
	PrefillRetryOnce bool
	// AIBrixMetrics also emits AIBrix's metric names next to pdgate's.
	AIBrixMetrics bool

	envErr error
	// env records the AIBRIX_*/SGLANG_* variables read for settings that apply to one engine
	// only, by flag name: checkEngineSettings decides between refusal and warning.
	env map[string]envValue
	// warnings are the ignored settings checkEngineSettings found (logged by Run).
	warnings []string
	// trtMachineID is the machine id in effect (Validate derives it).
	trtMachineID int
}

// envValue is one engine-scoped variable as read: its name, raw text, and the value it
// parsed to ("" with err set when it did not parse).
type envValue struct {
	name, raw, parsed string
	err               error
}

// Stages for --enable-tls and --tls-insecure-skip-verify.
var Stages = []string{"prefiller", "decoder", "encoder"}

// envScopedSeconds is envSeconds for a setting that applies to one engine only: a bad value
// is recorded for checkEngineSettings instead of failing every engine's start.
func (o *Options) envScopedSeconds(flagName, name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		o.recordEnv(flagName, name, v, "", errors.New("want a non-negative integer (seconds)"))
		return def
	}
	d := time.Duration(n) * time.Second
	o.recordEnv(flagName, name, v, d.String(), nil)
	return d
}

// envScopedInt reads an engine-scoped integer variable.
func (o *Options) envScopedInt(flagName, name string, def int) int {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil {
		o.recordEnv(flagName, name, v, "", errors.New("want an integer"))
		return def
	}
	o.recordEnv(flagName, name, v, strconv.Itoa(n), nil)
	return n
}

// envScopedString reads an engine-scoped string variable (lower-cased).
func (o *Options) envScopedString(flagName, name, def string) string {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	s := strings.ToLower(strings.TrimSpace(v))
	o.recordEnv(flagName, name, v, s, nil)
	return s
}

func (o *Options) recordEnv(flagName, name, raw, parsed string, err error) {
	if o.env == nil {
		o.env = map[string]envValue{}
	}
	o.env[flagName] = envValue{name: name, raw: raw, parsed: parsed, err: err}
}

// envSeconds reads an AIBRIX_* variable (non-negative integer seconds) as a default.
func (o *Options) envSeconds(name string, def time.Duration) time.Duration {
	v, ok := os.LookupEnv(name)
	if !ok || strings.TrimSpace(v) == "" {
		return def
	}
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 0 {
		o.envErr = errors.Join(o.envErr, fmt.Errorf("environment %s=%q: want a non-negative integer (seconds)", name, v))
		return def
	}
	return time.Duration(n) * time.Second
}

// NewOptions returns the defaults, with the mirrored environment variables applied.
func NewOptions() *Options {
	o := &Options{
		Listen:                ":8000",
		EngineURL:             "http://127.0.0.1:8001",
		Engine:                string(proxy.EngineVLLM),
		FailurePolicy:         string(proxy.FallbackLocal),
		PrefillMaxRetries:     2,
		PrefillRetryBackoff:   200 * time.Millisecond,
		EncodeTimeout:         30 * time.Second,
		PrefillReleaseTimeout: proxy.DefaultPrefillReleaseTimeout,
		ReadHeaderTimeout:     30 * time.Second,
		IdleTimeout:           300 * time.Second,
		ShutdownTimeout:       60 * time.Second,
		MaxRequestBytes:       32 << 20,
		MaxIdleConnsPerHost:   1024,
		InferencePool:         os.Getenv("INFERENCE_POOL"),
		PodName:               os.Getenv("POD_NAME"),
		PrefillRetryOnce:      true,
	}
	// AIBrix's default connector is shfs (docs/aibrix-knobs.md); AIBrix fleets relying on the
	// default need its remote_host rewrite.
	o.KVConnector = o.envScopedString("kv-connector", "AIBRIX_KV_CONNECTOR_TYPE", string(proxy.ConnectorSHFS))
	o.TRTSchedule = o.envScopedString("trt-schedule-style", "AIBRIX_TRT_SCHEDULE_STYLE", string(proxy.ContextFirst))
	o.TRTMachineID = o.envScopedInt("trt-machine-id", "AIBRIX_TRT_MACHINE_ID", 0)
	o.BootstrapPort = o.envScopedInt("sglang-bootstrap-port", "SGLANG_BOOTSTRAP_PORT", 8998)
	o.PrefillTimeout = o.envSeconds("AIBRIX_PREFILL_REQUEST_TIMEOUT", 30*time.Second)
	o.AbortTimeout = o.envScopedSeconds("decode-abort-timeout", "AIBRIX_DECODE_ABORT_TIMEOUT", 3*time.Second)
	o.AbortRetryDelay = o.envScopedSeconds("decode-abort-retry-delay", "AIBRIX_DECODE_ABORT_RETRY_DELAY", 2*time.Second)
	o.FirstResponseTimeout = o.envSeconds("AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT", 60*time.Second)
	o.ResponseTimeout = o.envSeconds("AIBRIX_DECODE_RESPONSE_TIMEOUT", 0)
	o.StreamIdleTimeout = o.envSeconds("AIBRIX_DECODE_STREAM_IDLE_TIMEOUT", 120*time.Second)
	return o
}

// BindFlags registers every flag on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Listen, "listen", o.Listen, "address the sidecar listens on (host:port)")
	fs.IntVar(&o.DataParallelSize, "data-parallel-size", 1, "data-parallel ranks of the local decode engine (rank r on the --engine-url port + r); the decode leg goes to the rank the prefill reports (remote_dp_rank), else the one x-data-parallel-host-port names (--listen port + r)")
	fs.IntVar(&o.KVSideChannelPortStride, "kv-side-channel-port-stride", 0, "with --data-parallel-size > 1: offset the prefill's reported KV side-channel port (remote_port) by its rank × this stride (0 = off)")
	fs.StringVar(&o.EngineURL, "engine-url", o.EngineURL, "URL of the local decode engine")
	fs.StringVar(&o.Engine, "engine", o.Engine, "decode engine dialect: "+proxy.Join(proxy.Engines))
	fs.StringVar(&o.KVConnector, "kv-connector", o.KVConnector, "vLLM KV connector: "+proxy.Join(proxy.Connectors)+" (env AIBRIX_KV_CONNECTOR_TYPE)")
	fs.StringVar(&o.TRTSchedule, "trt-schedule-style", o.TRTSchedule, "TensorRT-LLM schedule style: "+proxy.Join(proxy.ScheduleStyles)+" (env AIBRIX_TRT_SCHEDULE_STYLE)")
	fs.IntVar(&o.TRTMachineID, "trt-machine-id", o.TRTMachineID, "TensorRT-LLM Snowflake machine id in [0,1024), distinct per sidecar sharing workers (env AIBRIX_TRT_MACHINE_ID)")
	fs.IntVar(&o.TRTMachineIDSlots, "trt-machine-id-slots", o.TRTMachineIDSlots, "TensorRT-LLM: when > 0, --trt-machine-id is the first of this many machine ids reserved for this pod's StatefulSet, and the sidecar takes --trt-machine-id + the pod's ordinal (from --pod-name); a pod whose ordinal is not below this count refuses to start")
	fs.StringVar(&o.PodName, "pod-name", o.PodName, "this pod's name, for --trt-machine-id-slots (env POD_NAME)")
	fs.IntVar(&o.BootstrapPort, "sglang-bootstrap-port", o.BootstrapPort, "SGLang bootstrap port used when the EPP sends none (env SGLANG_BOOTSTRAP_PORT)")
	fs.DurationVar(&o.PrefillTimeout, "prefill-timeout", o.PrefillTimeout, "deadline of the prefill leg, all attempts together (env AIBRIX_PREFILL_REQUEST_TIMEOUT, seconds)")
	fs.StringVar(&o.FailurePolicy, "prefill-failure-policy", o.FailurePolicy, "on prefill failure: "+proxy.Join(proxy.FailurePolicies))
	fs.IntVar(&o.PrefillMaxRetries, "prefill-max-retries", o.PrefillMaxRetries, "extra prefill attempts under the retry policy (0..10)")
	fs.DurationVar(&o.PrefillRetryBackoff, "prefill-retry-backoff", o.PrefillRetryBackoff, "backoff before the first retry, doubled each retry")
	fs.BoolVar(&o.PrefillRetryOnce, "prefill-retry-once", o.PrefillRetryOnce, "retry a failed prefill once (on the EPP's alternate prefill pod of the same roleset when it names one) before --prefill-failure-policy applies")
	fs.BoolVar(&o.AIBrixMetrics, "aibrix-metrics", o.AIBrixMetrics, "also emit AIBrix's metric names (gateway_request_model_fail_total{status,status_code}) next to pdgate's")
	fs.DurationVar(&o.EncodeTimeout, "encode-timeout", o.EncodeTimeout, "deadline of the encode fan-out")
	fs.DurationVar(&o.PrefillReleaseTimeout, "prefill-release-timeout", o.PrefillReleaseTimeout, "deadline of the background POST to the EPP's x-pdgate-prefill-release callback made when a prefill leg returns; 0 disables the callback")
	fs.DurationVar(&o.AbortTimeout, "decode-abort-timeout", o.AbortTimeout, "timeout of each SGLang /abort_request; 0 disables aborts (env AIBRIX_DECODE_ABORT_TIMEOUT, seconds)")
	fs.DurationVar(&o.AbortRetryDelay, "decode-abort-retry-delay", o.AbortRetryDelay, "delay before the second /abort_request; 0 sends one (env AIBRIX_DECODE_ABORT_RETRY_DELAY, seconds)")
	fs.DurationVar(&o.FirstResponseTimeout, "decode-first-response-timeout", o.FirstResponseTimeout, "streaming decode: time to the first body chunk; 0 disables (env AIBRIX_DECODE_FIRST_RESPONSE_TIMEOUT, seconds)")
	fs.DurationVar(&o.ResponseTimeout, "decode-response-timeout", o.ResponseTimeout, "non-streaming decode: time to the whole body; 0 disables (env AIBRIX_DECODE_RESPONSE_TIMEOUT, seconds)")
	fs.DurationVar(&o.StreamIdleTimeout, "decode-stream-idle-timeout", o.StreamIdleTimeout, "streaming decode: longest gap between body chunks; 0 disables (env AIBRIX_DECODE_STREAM_IDLE_TIMEOUT, seconds)")
	fs.StringVar(&o.Allowlist, "allowlist", o.Allowlist, "static allow-list of prefill/encode targets, host:port comma-separated")
	fs.StringVar(&o.AllowlistFile, "allowlist-file", o.AllowlistFile, "file with allowed host:port targets, one per line")
	fs.BoolVar(&o.AllowlistDisable, "allowlist-disable", o.AllowlistDisable, "DANGEROUS: call any prefill/encode target a header names")
	fs.StringVar(&o.InferencePool, "inference-pool", o.InferencePool, "allow the pods of this InferencePool (namespace/name or name), watched through the Kubernetes API (env INFERENCE_POOL)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig for --inference-pool (default: in-cluster)")
	fs.StringVar(&o.TLSCertFile, "tls-cert-file", o.TLSCertFile, "serve TLS with this certificate (with --tls-key-file)")
	fs.StringVar(&o.TLSKeyFile, "tls-key-file", o.TLSKeyFile, "key of --tls-cert-file")
	fs.BoolVar(&o.TLSSelfSigned, "tls-self-signed", o.TLSSelfSigned, "serve TLS with a generated self-signed certificate")
	fs.StringVar(&o.EnableTLS, "enable-tls", o.EnableTLS, "stages called over TLS: "+strings.Join(Stages, ","))
	fs.StringVar(&o.TLSInsecureSkipVerify, "tls-insecure-skip-verify", o.TLSInsecureSkipVerify, "stages whose server certificate is not verified: "+strings.Join(Stages, ","))
	fs.StringVar(&o.TLSCAFile, "tls-ca-file", o.TLSCAFile, "CA bundle to verify TLS stages (default: system roots)")
	fs.DurationVar(&o.ReadHeaderTimeout, "read-header-timeout", o.ReadHeaderTimeout, "listener: time to read request headers")
	fs.DurationVar(&o.IdleTimeout, "idle-timeout", o.IdleTimeout, "listener: keep-alive idle timeout")
	fs.DurationVar(&o.ShutdownTimeout, "shutdown-timeout", o.ShutdownTimeout, "graceful shutdown: time to finish in-flight streams")
	fs.Int64Var(&o.MaxRequestBytes, "max-request-bytes", o.MaxRequestBytes, "largest request body accepted (413 beyond)")
	fs.IntVar(&o.MaxIdleConnsPerHost, "max-idle-conns-per-host", o.MaxIdleConnsPerHost, "idle connections kept per target")
	fs.StringVar(&o.MetricsListen, "metrics-listen", o.MetricsListen, "extra listener for /metrics (metrics are always on the main listener at /sidecar/metrics)")
}

// Validate checks what proxy.Config does not.
func (o *Options) Validate() error {
	if o.envErr != nil {
		return o.envErr
	}
	if err := o.checkEngineSettings(); err != nil {
		return err
	}
	o.trtMachineID = o.TRTMachineID
	if o.Engine == string(proxy.EngineTRTLLM) && o.TRTMachineIDSlots > 0 {
		id, err := deriveTRTMachineID(o.TRTMachineID, o.TRTMachineIDSlots, o.PodName)
		if err != nil {
			return err
		}
		o.trtMachineID = id
	}
	if (o.TLSCertFile == "") != (o.TLSKeyFile == "") {
		return errors.New("--tls-cert-file and --tls-key-file go together")
	}
	if o.TLSCertFile != "" && o.TLSSelfSigned {
		return errors.New("--tls-self-signed conflicts with --tls-cert-file")
	}
	for name, v := range map[string]string{"--enable-tls": o.EnableTLS, "--tls-insecure-skip-verify": o.TLSInsecureSkipVerify} {
		if _, err := parseStages(v); err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
	}
	sources := 0
	for _, set := range []bool{o.Allowlist != "", o.AllowlistFile != "", o.InferencePool != ""} {
		if set {
			sources++
		}
	}
	if o.AllowlistDisable && sources > 0 {
		return errors.New("--allowlist-disable conflicts with --allowlist, --allowlist-file and --inference-pool")
	}
	if !o.AllowlistDisable && sources == 0 {
		return errors.New("the allow-list is on by default: give --allowlist, --allowlist-file or --inference-pool (or --allowlist-disable)")
	}
	if o.InferencePool != "" && (o.Allowlist != "" || o.AllowlistFile != "") {
		return errors.New("--inference-pool conflicts with --allowlist and --allowlist-file")
	}
	return nil
}

func parseStages(v string) (map[string]bool, error) {
	out := map[string]bool{}
	for _, s := range strings.Split(v, ",") {
		s = strings.TrimSpace(s)
		if s == "" {
			continue
		}
		ok := false
		for _, st := range Stages {
			ok = ok || st == s
		}
		if !ok {
			return nil, fmt.Errorf("stage %q: must be one of %s", s, strings.Join(Stages, ","))
		}
		out[s] = true
	}
	return out, nil
}
