package kvevents

import (
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestParseConfig(t *testing.T) {
	tests := []struct {
		name    string
		raw     string
		check   func(t *testing.T, r Resolved)
		wantErr string
	}{
		{name: "defaults", raw: ``, check: func(t *testing.T, r Resolved) {
			if r.BlockSize != 16 || r.TopicFilter != "kv@" || !r.DiscoverPods || r.SocketPort != 5557 || r.Central != "" ||
				r.PodCacheSize != 10 || r.TierWeights["cpu"] != 0.8 || r.TierWeights["gpu"] != 1 || r.SpeculativeTTL != 2*time.Second {
				t.Fatalf("defaults: %+v", r)
			}
		}},
		{name: "llm-d's epp-precise-prefix-cache-config", raw: `{"tokenProcessorConfig":{"blockSize":64},"indexerConfig":{"kvBlockIndexConfig":{"enableMetrics":true}}}`,
			check: func(t *testing.T, r Resolved) {
				if r.BlockSize != 64 {
					t.Fatalf("blockSize alias: %d", r.BlockSize)
				}
			}},
		{name: "central mode, seed, nanosecond logging interval, exponent size", raw: `{"tokenProcessorConfig":{"blockSizeTokens":16,"hashSeed":"42"},
			"kvEventsConfig":{"zmqEndpoint":"tcp://0.0.0.0:5557"},"indexerConfig":{"kvBlockIndexConfig":{"metricsLoggingInterval":60000000000,
			"inMemoryConfig":{"size":1e8,"podCacheSize":4}}}}`,
			check: func(t *testing.T, r Resolved) {
				if r.Central != "tcp://0.0.0.0:5557" || r.HashSeed != "42" || r.MetricsLoggingInterval != time.Minute || r.Size != 1e8 || r.PodCacheSize != 4 {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "older nesting under indexerConfig", raw: `{"indexerConfig":{"prefixStoreConfig":{"blockSize":16},"tokenProcessorConfig":{"blockSize":32,"hashSeed":"7"},
			"tokenizersPoolConfig":{"tokenizersCacheDir":"/cache"}}}`,
			check: func(t *testing.T, r Resolved) {
				if r.BlockSize != 32 || r.HashSeed != "7" || !r.HasTokenizersPool {
					t.Fatalf("%+v", r)
				}
			}},
		{name: "tier weights", raw: `{"indexerConfig":{"kvCacheBackendConfigs":[{"name":"GPU","weight":1},{"name":"cpu","weight":0.4}]}}`,
			check: func(t *testing.T, r Resolved) {
				if r.TierWeights["gpu"] != 1 || r.TierWeights["cpu"] != 0.4 {
					t.Fatalf("%v", r.TierWeights)
				}
			}},
		{name: "May 2026: approx-producer keys misplaced under indexerConfig and kvBlockIndexConfig are ignored, by name",
			raw: `{"indexerConfig":{"hashBlockSize":64,"kvBlockIndexConfig":{"maxPrefixBlocksToMatch":256,"enableMetrics":true}}}`,
			check: func(t *testing.T, r Resolved) {
				want := []string{"indexerConfig.hashBlockSize", "indexerConfig.kvBlockIndexConfig.maxPrefixBlocksToMatch"}
				if strings.Join(r.Ignored, ",") != strings.Join(want, ",") || r.BlockSize != 16 {
					t.Fatalf("ignored %v (want %v), block size %d", r.Ignored, want, r.BlockSize)
				}
			}},
		{name: "unknown field", raw: `{"kvEventsConfig":{"topicFiltr":"kv@"}}`, wantErr: "topicFiltr"},
		{name: "a misplaced key still must be JSON", raw: `{"indexerConfig":{"kvBlockIndexConfig":{"maxPrefixBlocksToMatch":}}}`, wantErr: "invalid"},
		{name: "negative block size", raw: `{"tokenProcessorConfig":{"blockSizeTokens":-1}}`, wantErr: "tokenProcessorConfig.blockSizeTokens"},
		{name: "bad algorithm", raw: `{"tokenProcessorConfig":{"hashAlgorithm":"md5"}}`, wantErr: "tokenProcessorConfig.hashAlgorithm"},
		{name: "redis", raw: `{"indexerConfig":{"kvBlockIndexConfig":{"redisConfig":{"address":"redis://x"}}}}`, wantErr: "redisConfig"},
		{name: "bad engine", raw: `{"kvEventsConfig":{"engineType":"trtllm"}}`, wantErr: "kvEventsConfig.engineType"},
		{name: "bad endpoint", raw: `{"kvEventsConfig":{"zmqEndpoint":"0.0.0.0:5557"}}`, wantErr: "kvEventsConfig.zmqEndpoint"},
		{name: "bad port", raw: `{"kvEventsConfig":{"podDiscoveryConfig":{"socketPort":70000}}}`, wantErr: "socketPort"},
		{name: "bad ttl", raw: `{"speculativeTTL":"soon"}`, wantErr: "speculativeTTL"},
		{name: "bad weight", raw: `{"indexerConfig":{"kvCacheBackendConfigs":[{"name":"cpu","weight":-1}]}}`, wantErr: "kvCacheBackendConfigs[0].weight"},
		{name: "fractional size", raw: `{"indexerConfig":{"kvBlockIndexConfig":{"inMemoryConfig":{"size":1.5}}}}`, wantErr: "integer"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, r, err := ParseConfig("test", "test", []byte(tc.raw))
			if plugintest.WantErr(t, err, tc.wantErr) {
				return
			}
			tc.check(t, r)
		})
	}
}
