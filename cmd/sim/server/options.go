// Package server is the simulator's model server: the OpenAI API in the vLLM, SGLang and
// TensorRT-LLM dialects, the prefill/decode/combined/encode roles, the simulator-to-simulator
// KV handoff, fault injection and engine metrics, on top of the batching scheduler.
package server

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Dialects, roles and connectors.
const (
	DialectVLLM   = "vllm"
	DialectSGLang = "sglang"
	DialectTRTLLM = "trtllm"

	RolePrefill  = "prefill"
	RoleDecode   = "decode"
	RoleCombined = "combined"
	RoleEncode   = "encode"

	ConnectorNIXL          = "nixl"
	ConnectorSharedStorage = "shared-storage"
	ConnectorBootstrap     = "bootstrap"
	ConnectorUCX           = "ucx"
)

// Duration reads "2s"-style strings from YAML/JSON.
type Duration struct{ time.Duration }

// UnmarshalJSON accepts a Go duration string or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		v, err := time.ParseDuration(string(b[1 : len(b)-1]))
		if err != nil {
			return err
		}
		d.Duration = v
		return nil
	}
	var secs float64
	if _, err := fmt.Sscan(string(b), &secs); err != nil {
		return fmt.Errorf("duration %s: %w", b, err)
	}
	d.Duration = time.Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the Go duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// Options configure one simulator instance. Field names are the --instances-file keys.
type Options struct {
	Name                 string   `json:"name,omitempty"`
	Host                 string   `json:"host,omitempty"`
	Port                 int      `json:"port"`
	AdvertiseHost        string   `json:"advertiseHost,omitempty"`
	Dialect              string   `json:"dialect,omitempty"`
	Role                 string   `json:"role,omitempty"`
	KVConnector          string   `json:"kvConnector,omitempty"`
	Profile              string   `json:"profile,omitempty"`
	Model                string   `json:"model,omitempty"`
	Seed                 uint64   `json:"seed,omitempty"`
	TimeScale            float64  `json:"timeScale,omitempty"`
	MaxBatch             int      `json:"maxBatch,omitempty"`
	KVCapacityTokens     int      `json:"kvCapacityTokens,omitempty"`
	KVFullPolicy         string   `json:"kvFullPolicy,omitempty"`
	ChunkedPrefillTokens *int     `json:"chunkedPrefillTokens,omitempty"`
	BootstrapPort        int      `json:"bootstrapPort,omitempty"`
	KVTTL                Duration `json:"kvTTL,omitempty"`
	KVWaitTimeout        Duration `json:"kvWaitTimeout,omitempty"`
	SharedStorageDir     string   `json:"sharedStorageDir,omitempty"`
	// Data-parallel ranks (dataparallel.go): DataParallelSize N > 1 makes this instance rank
	// DataParallelRank of N; ExpandDataParallel builds the N instances.
	DataParallelSize int `json:"dataParallelSize,omitempty"`
	DataParallelRank int `json:"dataParallelRank,omitempty"`
	// KV-cache events (vLLM's --kv-events-config): off unless an endpoint is set.
	KVEventsEndpoint string `json:"kvEventsEndpoint,omitempty"`
	KVEventsTopic    string `json:"kvEventsTopic,omitempty"`
	KVEventsFormat   string `json:"kvEventsFormat,omitempty"`
	// KVEventsSeqStart is the first sequence number (vLLM and SGLang: 0; some publishers 1).
	KVEventsSeqStart uint64 `json:"kvEventsSeqStart,omitempty"`
	// KVEventsNoStartClear leaves out the AllBlocksCleared the sim publishes first (vLLM and
	// SGLang publish nothing at start), so a subscriber must detect a restart on its own.
	KVEventsNoStartClear bool `json:"kvEventsNoStartClear,omitempty"`

	Fault5xxRate            float64  `json:"fault5xxRate,omitempty"`
	FaultPrefillFailRate    float64  `json:"faultPrefillFailRate,omitempty"`
	FaultPrefillSlow        Duration `json:"faultPrefillSlow,omitempty"`
	FaultHangFirstTokenRate float64  `json:"faultHangFirstTokenRate,omitempty"`
	FaultStallAfter         int      `json:"faultStallAfter,omitempty"`
	FaultDropRate           float64  `json:"faultDropRate,omitempty"`
	AllowFaultHeader        *bool    `json:"allowFaultHeader,omitempty"`

	// Embedding only (not from files or flags).
	Logger       logr.Logger        `json:"-"`
	Clock        batching.Clock     `json:"-"` // default: a ScaledClock at TimeScale
	ProfileValue *costmodel.Profile `json:"-"` // overrides Profile
	// Tracer, when set, records each request's engine spans in the dialect's shape (tracing.go).
	Tracer trace.Tracer `json:"-"`
}

// BindFlags registers the single-instance flags on fs.
func (o *Options) BindFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.Name, "name", "", "instance name (logs)")
	fs.StringVar(&o.Host, "host", "127.0.0.1", "listen address")
	fs.IntVar(&o.Port, "port", 8000, "HTTP port (0 = any free port)")
	fs.StringVar(&o.AdvertiseHost, "advertise-host", "", "host named in KV handoff metadata (default --host)")
	fs.StringVar(&o.Dialect, "dialect", DialectVLLM, "vllm, sglang or trtllm")
	fs.StringVar(&o.Role, "role", RoleCombined, "prefill, decode, combined or encode")
	fs.StringVar(&o.KVConnector, "kv-connector", "", "vllm: nixl (default) or shared-storage; sglang: bootstrap; trtllm: ucx")
	fs.StringVar(&o.Profile, "profile", "", "cost profile YAML (default: built-in llama3-8b-h100)")
	fs.StringVar(&o.Model, "model", "", "served model name (default: the profile's model)")
	fs.Uint64Var(&o.Seed, "seed", 1, "PRNG seed")
	fs.Float64Var(&o.TimeScale, "time-scale", 1, "model seconds per wall second")
	fs.IntVar(&o.MaxBatch, "max-batch", 0, "max running requests (default: profile)")
	fs.IntVar(&o.KVCapacityTokens, "kv-capacity-tokens", 0, "KV capacity in tokens (default: profile)")
	fs.StringVar(&o.KVFullPolicy, "kv-full-policy", "queue", "queue, preempt or reject")
	fs.Func("chunked-prefill-tokens", "prefill tokens per step, 0 = whole prompts (default: profile)", func(s string) error {
		var v int
		if _, err := fmt.Sscan(s, &v); err != nil {
			return err
		}
		o.ChunkedPrefillTokens = &v
		return nil
	})
	fs.IntVar(&o.BootstrapPort, "bootstrap-port", 8998, "SGLang bootstrap listener port (prefill role; 0 = any free port)")
	fs.DurationVar(&o.KVTTL.Duration, "kv-ttl", 120*time.Second, "how long produced KV can be pulled (model time)")
	fs.DurationVar(&o.KVWaitTimeout.Duration, "kv-wait-timeout", 30*time.Second, "how long a decode waits for KV not yet produced (model time)")
	fs.StringVar(&o.SharedStorageDir, "shared-storage-dir", "", "shared KV store and EC cache directory")
	fs.StringVar(&o.KVEventsEndpoint, "kv-events-endpoint", "", "publish KV-cache events on this ZeroMQ endpoint (tcp://*:5557 binds, tcp://host:port connects); off when empty")
	fs.StringVar(&o.KVEventsTopic, "kv-events-topic", "", "KV-event topic (default kv@<advertise-host>:<port>@<model>)")
	fs.Uint64Var(&o.KVEventsSeqStart, "kv-events-seq-start", 0, "first KV-event sequence number (vLLM and SGLang count from 0)")
	fs.BoolVar(&o.KVEventsNoStartClear, "kv-events-no-start-clear", false, "do not publish AllBlocksCleared at start (as vLLM and SGLang do not)")
	fs.StringVar(&o.KVEventsFormat, "kv-events-format", KVEventsFormatMap, "map (vLLM >= 0.24) or array (vLLM <= 0.23, SGLang) events")
	fs.Float64Var(&o.Fault5xxRate, "fault-5xx-rate", 0, "fraction of requests answered 500 (seeded)")
	fs.Float64Var(&o.FaultPrefillFailRate, "fault-prefill-fail-rate", 0, "fraction of prefills that fail")
	fs.DurationVar(&o.FaultPrefillSlow.Duration, "fault-prefill-slow", 0, "extra model time added to every prefill")
	fs.Float64Var(&o.FaultHangFirstTokenRate, "fault-hang-first-token-rate", 0, "fraction of requests that never produce a first token")
	fs.IntVar(&o.FaultStallAfter, "fault-stall-after", 0, "stall every stream after N tokens (0 = off)")
	fs.Float64Var(&o.FaultDropRate, "fault-drop-rate", 0, "fraction of requests whose connection is dropped")
	o.bindDataParallelFlags(fs)
	allow := true
	o.AllowFaultHeader = &allow
	fs.BoolVar(o.AllowFaultHeader, "allow-fault-header", true, "honour the x-sim-fault request header")
}

// LoadInstancesFile reads a YAML list of Options.
func LoadInstancesFile(path string) ([]Options, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read instances file: %w", err)
	}
	var out []Options
	if err := yaml.UnmarshalStrict(b, &out); err != nil {
		return nil, fmt.Errorf("instances file %s: %w", path, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("instances file %s: no instances", path)
	}
	return out, nil
}

// complete fills defaults and validates; the returned profile has the overrides applied.
func (o *Options) complete() (*costmodel.Profile, error) {
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.AdvertiseHost == "" {
		o.AdvertiseHost = o.Host
	}
	if o.Dialect == "" {
		o.Dialect = DialectVLLM
	}
	if o.Role == "" {
		o.Role = RoleCombined
	}
	if o.TimeScale == 0 {
		o.TimeScale = 1
	}
	if o.KVTTL.Duration == 0 {
		o.KVTTL.Duration = 120 * time.Second
	}
	if o.KVWaitTimeout.Duration == 0 {
		o.KVWaitTimeout.Duration = 30 * time.Second
	}
	if o.AllowFaultHeader == nil {
		t := true
		o.AllowFaultHeader = &t
	}
	var errs []error
	switch o.Dialect {
	case DialectVLLM:
		if o.KVConnector == "" {
			o.KVConnector = ConnectorNIXL
		}
		if o.KVConnector != ConnectorNIXL && o.KVConnector != ConnectorSharedStorage {
			errs = append(errs, fmt.Errorf("kvConnector: vllm supports nixl or shared-storage, got %q", o.KVConnector))
		}
	case DialectSGLang:
		if o.KVConnector == "" {
			o.KVConnector = ConnectorBootstrap
		}
		if o.KVConnector != ConnectorBootstrap {
			errs = append(errs, fmt.Errorf("kvConnector: sglang supports bootstrap, got %q", o.KVConnector))
		}
	case DialectTRTLLM:
		if o.KVConnector == "" {
			o.KVConnector = ConnectorUCX
		}
		if o.KVConnector != ConnectorUCX {
			errs = append(errs, fmt.Errorf("kvConnector: trtllm supports ucx, got %q", o.KVConnector))
		}
	default:
		errs = append(errs, fmt.Errorf("dialect must be vllm, sglang or trtllm, got %q", o.Dialect))
	}
	switch o.Role {
	case RolePrefill, RoleDecode, RoleCombined, RoleEncode:
	default:
		errs = append(errs, fmt.Errorf("role must be prefill, decode, combined or encode, got %q", o.Role))
	}
	if o.Port < 0 || o.Port > 65535 {
		errs = append(errs, fmt.Errorf("port must be in 0..65535, got %d", o.Port))
	}
	if o.BootstrapPort < 0 || o.BootstrapPort > 65535 {
		errs = append(errs, fmt.Errorf("bootstrapPort must be in 0..65535, got %d", o.BootstrapPort))
	}
	if !(o.TimeScale > 0) {
		errs = append(errs, fmt.Errorf("timeScale must be > 0, got %v", o.TimeScale))
	}
	for name, v := range map[string]float64{"fault5xxRate": o.Fault5xxRate, "faultPrefillFailRate": o.FaultPrefillFailRate,
		"faultHangFirstTokenRate": o.FaultHangFirstTokenRate, "faultDropRate": o.FaultDropRate} {
		if v < 0 || v > 1 || v != v {
			errs = append(errs, fmt.Errorf("%s must be in [0,1], got %v", name, v))
		}
	}
	if err := validKVEventsOptions(o); err != nil {
		errs = append(errs, err)
	}
	if err := validDataParallel(o); err != nil {
		errs = append(errs, err)
	}
	if o.FaultStallAfter < 0 {
		errs = append(errs, fmt.Errorf("faultStallAfter must be >= 0, got %d", o.FaultStallAfter))
	}
	if o.KVConnector == ConnectorSharedStorage && o.SharedStorageDir == "" {
		errs = append(errs, errors.New("sharedStorageDir is required with kvConnector shared-storage"))
	}
	if _, err := batching.ParsePolicy(o.KVFullPolicy); err != nil {
		errs = append(errs, fmt.Errorf("kvFullPolicy: %w", err))
	}
	if o.MaxBatch < 0 || o.KVCapacityTokens < 0 {
		errs = append(errs, errors.New("maxBatch and kvCapacityTokens must be >= 0"))
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	prof := o.ProfileValue
	if prof == nil {
		prof = costmodel.Default()
		if o.Profile != "" {
			p, err := costmodel.Load(o.Profile)
			if err != nil {
				return nil, err
			}
			prof = p
		}
	}
	cp := *prof
	if o.MaxBatch > 0 {
		cp.MaxBatch = o.MaxBatch
	}
	if o.KVCapacityTokens > 0 {
		cp.KVCapacityTokens = o.KVCapacityTokens
	}
	if o.ChunkedPrefillTokens != nil {
		if *o.ChunkedPrefillTokens < 0 {
			return nil, fmt.Errorf("chunkedPrefillTokens must be >= 0, got %d", *o.ChunkedPrefillTokens)
		}
		cp.ChunkedPrefillTokens = *o.ChunkedPrefillTokens
	}
	if o.Model == "" {
		o.Model = cp.Model
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("%s-%s", o.Dialect, o.Role)
	}
	return &cp, nil
}
