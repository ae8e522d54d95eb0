package kvevents

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Config is the parameter set of llm-d's precise-prefix-cache-producer and
// precise-prefix-cache-scorer, with llm-d's names and defaults (pdgate's additions are marked).
type Config struct {
	TokenProcessorConfig TokenProcessorConfig `json:"tokenProcessorConfig"`
	IndexerConfig        IndexerConfig        `json:"indexerConfig"`
	KVEventsConfig       KVEventsConfig       `json:"kvEventsConfig"`
	// SpeculativeIndexing records a request's blocks for its picked endpoints right after
	// scheduling, until the engine's own events arrive or SpeculativeTTL passes.
	SpeculativeIndexing bool   `json:"speculativeIndexing"`
	SpeculativeTTL      string `json:"speculativeTTL"`
}

// TokenProcessorConfig says how request keys are computed.
type TokenProcessorConfig struct {
	// BlockSizeTokens is the canonical block size (default 16); it must divide the engines'
	// block size.
	BlockSizeTokens int `json:"blockSizeTokens"`
	// BlockSize is llm-d's deprecated alias, used when BlockSizeTokens is 0.
	BlockSize int `json:"blockSize"`
	// HashSeed seeds the request-key chain (internal to the EPP).
	HashSeed string `json:"hashSeed"`
	// HashAlgorithm is llm-d's "cbor-fnv" (default) or "xxh64"; both select pdgate's xxh64
	// chain (request keys never leave one EPP process).
	HashAlgorithm string `json:"hashAlgorithm"`
}

// IndexerConfig configures the index.
type IndexerConfig struct {
	KVBlockIndexConfig    KVBlockIndexConfig `json:"kvBlockIndexConfig"`
	KVCacheBackendConfigs []BackendConfig    `json:"kvCacheBackendConfigs"`
	// TokenizersPoolConfig is llm-d's deprecated in-process tokenizer pool: refused by the
	// producer (as llm-d does), accepted and unused by the legacy scorer (pdgate reads the
	// tokens token-producer put on the request).
	TokenizersPoolConfig json.RawMessage `json:"tokenizersPoolConfig,omitempty"`
	// TokenProcessorConfig is where llm-d-kv-cache-manager (<= v0.4) configs put the token
	// processor; used when the top-level tokenProcessorConfig is absent.
	TokenProcessorConfig *TokenProcessorConfig `json:"tokenProcessorConfig,omitempty"`
	// PrefixStoreConfig is llm-d-kv-cache-manager's prompt-prefix store: accepted, unused.
	PrefixStoreConfig json.RawMessage `json:"prefixStoreConfig,omitempty"`
	MisplacedApproxKeys
}

// MisplacedApproxKeys are approx-prefix-cache-producer keys that llm-d configs of early 2026
// moved under indexerConfig (and some under its kvBlockIndexConfig): never fields there, llm-d
// ignored them until its strict decoding (May 2026) made them fatal. pdgate accepts and ignores
// them, naming each in Resolved.Ignored, so those files load; the precise index matches the
// whole prompt whatever they say.
type MisplacedApproxKeys struct {
	MaxPrefixBlocksToMatch json.RawMessage `json:"maxPrefixBlocksToMatch,omitempty"`
	HashBlockSize          json.RawMessage `json:"hashBlockSize,omitempty"`
}

// LogIgnored logs, once for the plugin, each misplaced key the configuration sets.
func LogIgnored(ctx context.Context, r Resolved, plugin string) {
	for _, key := range r.Ignored {
		log.FromContext(ctx).Info("Ignoring a key llm-d never read here: it is approx-prefix-cache-producer's, and the precise index matches the whole prompt",
			"plugin", plugin, "key", key)
	}
}

// ignored lists the keys set, under prefix.
func (m MisplacedApproxKeys) ignored(prefix string) []string {
	var out []string
	for name, v := range map[string]json.RawMessage{"maxPrefixBlocksToMatch": m.MaxPrefixBlocksToMatch, "hashBlockSize": m.HashBlockSize} {
		if t := bytes.TrimSpace(v); len(t) > 0 && string(t) != "null" {
			out = append(out, prefix+name)
		}
	}
	sort.Strings(out)
	return out
}

// KVBlockIndexConfig selects and bounds the index backend. Only the in-memory backend exists.
type KVBlockIndexConfig struct {
	InMemoryConfig        *InMemoryConfig `json:"inMemoryConfig"`
	CostAwareMemoryConfig json.RawMessage `json:"costAwareMemoryConfig,omitempty"`
	RedisConfig           json.RawMessage `json:"redisConfig,omitempty"`
	ValkeyConfig          json.RawMessage `json:"valkeyConfig,omitempty"`
	// EnableMetrics is accepted; pdgate's pdgate_kv_events_* metrics are always on.
	EnableMetrics bool `json:"enableMetrics"`
	// MetricsLoggingInterval, in nanoseconds (llm-d's time.Duration JSON) or a Go duration
	// string, logs the index size that often; 0 = never.
	MetricsLoggingInterval json.RawMessage `json:"metricsLoggingInterval,omitempty"`
	MisplacedApproxKeys
}

// InMemoryConfig bounds the in-memory index.
type InMemoryConfig struct {
	// Size bounds the distinct request keys (llm-d's default 1e8; pdgate's 1<<24).
	Size FlexInt `json:"size"`
	// PodCacheSize is llm-d's bound on the endpoints recorded per key (default 10): accepted
	// and validated, not applied. pdgate records every holder, because a prefix the whole
	// fleet holds would otherwise hide what the other pods hold past it (see Index).
	PodCacheSize FlexInt `json:"podCacheSize"`
	// MaxBlocksPerEndpoint (pdgate) bounds the blocks held per endpoint and rank (default
	// 262144); the least recently stored go first.
	MaxBlocksPerEndpoint FlexInt `json:"maxBlocksPerEndpoint"`
}

// BackendConfig weighs one cache tier.
type BackendConfig struct {
	Name   string  `json:"name"`
	Weight float64 `json:"weight"`
}

// KVEventsConfig says where events come from.
type KVEventsConfig struct {
	// ZMQEndpoint, when set, binds one SUB socket there (central mode; engines connect).
	ZMQEndpoint string `json:"zmqEndpoint"`
	// TopicFilter is the SUB prefix filter (default "kv@").
	TopicFilter *string `json:"topicFilter"`
	// Concurrency is llm-d's worker-shard count: accepted (> 0); pdgate applies each
	// endpoint's stream on its own goroutine.
	Concurrency int `json:"concurrency"`
	// EngineType is "vllm" (default) or "sglang"; one decoder reads both.
	EngineType string `json:"engineType"`
	// DiscoverPods (default true) dials every endpoint of the pool.
	DiscoverPods       *bool              `json:"discoverPods"`
	PodDiscoveryConfig PodDiscoveryConfig `json:"podDiscoveryConfig"`
}

// PodDiscoveryConfig says where a discovered endpoint publishes.
type PodDiscoveryConfig struct {
	// SocketPort (default 5557) + the endpoint's DP rank is dialled.
	SocketPort int `json:"socketPort"`
	// ReplaySocketPort is accepted; pdgate does not replay (a gap drops the endpoint's
	// blocks instead, so nothing stale is ever scored).
	ReplaySocketPort int `json:"replaySocketPort"`
	// PodLabelSelector and PodNamespace are llm-d leftovers: accepted, unused.
	PodLabelSelector string `json:"podLabelSelector"`
	PodNamespace     string `json:"podNamespace"`
}

// Defaults.
const (
	DefaultBlockSizeTokens      = 16
	DefaultTopicFilter          = "kv@"
	DefaultSocketPort           = 5557
	DefaultSize                 = 1 << 24
	DefaultPodCacheSize         = 10
	DefaultMaxBlocksPerEndpoint = 1 << 18
	DefaultSpeculativeTTL       = 2 * time.Second
)

// Resolved is a validated Config with every default applied.
type Resolved struct {
	BlockSize              int
	HashSeed               string
	Central                string
	TopicFilter            string
	DiscoverPods           bool
	SocketPort             int
	Size                   int
	PodCacheSize           int
	MaxBlocksPerEndpoint   int
	TierWeights            map[string]float64
	Speculative            bool
	SpeculativeTTL         time.Duration
	MetricsLoggingInterval time.Duration
	HasTokenizersPool      bool
	// Ignored names the misplaced approx-prefix-cache-producer keys the config sets
	// (MisplacedApproxKeys): the plugin logs them once.
	Ignored []string
}

// ParseConfig decodes raw strictly (an unknown field is an error naming it) and validates it.
// Errors name the plugin and the field.
func ParseConfig(pluginType, name string, raw json.RawMessage) (Config, Resolved, error) {
	var c Config
	if err := pluginkit.Decode(pluginType, name, raw, &c); err != nil {
		return c, Resolved{}, err
	}
	r, err := c.Resolve()
	if err != nil {
		return c, r, fmt.Errorf("%s %q: %w", pluginType, name, err)
	}
	return c, r, nil
}

// Resolve validates c and applies the defaults.
func (c Config) Resolve() (Resolved, error) {
	r := Resolved{HashSeed: c.TokenProcessorConfig.HashSeed, Central: c.KVEventsConfig.ZMQEndpoint, DiscoverPods: true,
		Speculative: c.SpeculativeIndexing, HasTokenizersPool: len(bytes.TrimSpace(c.IndexerConfig.TokenizersPoolConfig)) > 0 && string(bytes.TrimSpace(c.IndexerConfig.TokenizersPoolConfig)) != "null"}
	tp := c.TokenProcessorConfig
	if tp == (TokenProcessorConfig{}) && c.IndexerConfig.TokenProcessorConfig != nil {
		tp = *c.IndexerConfig.TokenProcessorConfig
		r.HashSeed = tp.HashSeed
	}
	switch {
	case tp.BlockSizeTokens < 0:
		return r, fmt.Errorf("tokenProcessorConfig.blockSizeTokens must be > 0, got %d", tp.BlockSizeTokens)
	case tp.BlockSizeTokens > 0:
		r.BlockSize = tp.BlockSizeTokens
	case tp.BlockSize < 0:
		return r, fmt.Errorf("tokenProcessorConfig.blockSize must be > 0, got %d", tp.BlockSize)
	case tp.BlockSize > 0:
		r.BlockSize = tp.BlockSize
	default:
		r.BlockSize = DefaultBlockSizeTokens
	}
	switch tp.HashAlgorithm {
	case "", "cbor-fnv", "xxh64":
	default:
		return r, fmt.Errorf("tokenProcessorConfig.hashAlgorithm must be cbor-fnv or xxh64, got %q", tp.HashAlgorithm)
	}
	ic := c.IndexerConfig.KVBlockIndexConfig
	r.Ignored = append(c.IndexerConfig.ignored("indexerConfig."), ic.ignored("indexerConfig.kvBlockIndexConfig.")...)
	for name, v := range map[string]json.RawMessage{"redisConfig": ic.RedisConfig, "valkeyConfig": ic.ValkeyConfig} {
		if t := bytes.TrimSpace(v); len(t) > 0 && string(t) != "null" {
			return r, fmt.Errorf("indexerConfig.kvBlockIndexConfig.%s is not supported: pdgate's KV-event index is in-process (use inMemoryConfig)", name)
		}
	}
	r.Size, r.PodCacheSize, r.MaxBlocksPerEndpoint = DefaultSize, DefaultPodCacheSize, DefaultMaxBlocksPerEndpoint
	if m := ic.InMemoryConfig; m != nil {
		if m.Size < 0 || m.PodCacheSize < 0 || m.MaxBlocksPerEndpoint < 0 {
			return r, fmt.Errorf("indexerConfig.kvBlockIndexConfig.inMemoryConfig: size, podCacheSize and maxBlocksPerEndpoint must be >= 0")
		}
		if m.Size > 0 {
			r.Size = int(m.Size)
		}
		if m.PodCacheSize > 0 {
			r.PodCacheSize = int(m.PodCacheSize)
		}
		if m.MaxBlocksPerEndpoint > 0 {
			r.MaxBlocksPerEndpoint = int(m.MaxBlocksPerEndpoint)
		}
	}
	d, err := parseNanosOrDuration(ic.MetricsLoggingInterval)
	if err != nil {
		return r, fmt.Errorf("indexerConfig.kvBlockIndexConfig.metricsLoggingInterval: %w", err)
	}
	r.MetricsLoggingInterval = d
	r.TierWeights = map[string]float64{"gpu": 1, "cpu": 0.8}
	if len(c.IndexerConfig.KVCacheBackendConfigs) > 0 {
		r.TierWeights = map[string]float64{}
		for i, b := range c.IndexerConfig.KVCacheBackendConfigs {
			if b.Name == "" {
				return r, fmt.Errorf("indexerConfig.kvCacheBackendConfigs[%d].name must not be empty", i)
			}
			if b.Weight < 0 {
				return r, fmt.Errorf("indexerConfig.kvCacheBackendConfigs[%d].weight must be >= 0, got %v", i, b.Weight)
			}
			r.TierWeights[strings.ToLower(b.Name)] = b.Weight
		}
	}
	ev := c.KVEventsConfig
	r.TopicFilter = DefaultTopicFilter
	if ev.TopicFilter != nil {
		r.TopicFilter = *ev.TopicFilter
	}
	if ev.Concurrency < 0 {
		return r, fmt.Errorf("kvEventsConfig.concurrency must be > 0, got %d", ev.Concurrency)
	}
	switch ev.EngineType {
	case "", "vllm", "sglang":
	default:
		return r, fmt.Errorf("kvEventsConfig.engineType must be vllm or sglang, got %q", ev.EngineType)
	}
	if ev.DiscoverPods != nil {
		r.DiscoverPods = *ev.DiscoverPods
	}
	if r.Central != "" {
		if !strings.HasPrefix(r.Central, "tcp://") && !strings.HasPrefix(r.Central, "ipc://") {
			return r, fmt.Errorf("kvEventsConfig.zmqEndpoint must be tcp://host:port or ipc://path, got %q", r.Central)
		}
	}
	pd := ev.PodDiscoveryConfig
	r.SocketPort = DefaultSocketPort
	if pd.SocketPort != 0 {
		if pd.SocketPort < 1 || pd.SocketPort > 65535 {
			return r, fmt.Errorf("kvEventsConfig.podDiscoveryConfig.socketPort must be a port, got %d", pd.SocketPort)
		}
		r.SocketPort = pd.SocketPort
	}
	if pd.ReplaySocketPort < 0 || pd.ReplaySocketPort > 65535 {
		return r, fmt.Errorf("kvEventsConfig.podDiscoveryConfig.replaySocketPort must be a port or 0, got %d", pd.ReplaySocketPort)
	}
	r.SpeculativeTTL = DefaultSpeculativeTTL
	if c.SpeculativeTTL != "" {
		d, err := time.ParseDuration(c.SpeculativeTTL)
		if err != nil || d <= 0 {
			return r, fmt.Errorf("speculativeTTL must be a positive Go duration, got %q", c.SpeculativeTTL)
		}
		r.SpeculativeTTL = d
	}
	return r, nil
}

func parseNanosOrDuration(raw json.RawMessage) (time.Duration, error) {
	t := strings.TrimSpace(string(raw))
	if t == "" || t == "null" {
		return 0, nil
	}
	if s, err := strconv.Unquote(t); err == nil {
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			return 0, fmt.Errorf("want nanoseconds or a Go duration, got %s", t)
		}
		return d, nil
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil || f < 0 {
		return 0, fmt.Errorf("want nanoseconds or a Go duration, got %s", t)
	}
	return time.Duration(f), nil
}

// FlexInt is an integer that also accepts an integral number written in exponent form
// (llm-d's documented "size: 1e8" arrives as 1e+08 once YAML is turned into JSON).
type FlexInt int

// UnmarshalJSON implements json.Unmarshaler.
func (f *FlexInt) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(string(b)), 64)
	if err != nil || v != float64(int64(v)) || v > 1<<40 || v < -(1<<40) {
		return fmt.Errorf("want an integer, got %s", b)
	}
	*f = FlexInt(v)
	return nil
}
