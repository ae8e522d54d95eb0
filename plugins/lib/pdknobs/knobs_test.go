package pdknobs

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

func env(m map[string]string) pluginkit.Env {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name    string
		env     map[string]string
		raw     string
		check   func(Knobs) bool
		wantErr string
		warns   int
	}{
		{name: "defaults", check: func(k Knobs) bool { return k == Defaults() }},
		{name: "env sets defaults", env: map[string]string{"AIBRIX_PREFILL_LOAD_IMBALANCE_MIN_SPREAD": "4",
			"AIBRIX_DECODE_SCORE_POLICY": "Least_Request", "AIBRIX_PROMPT_LENGTH_BUCKETING": "true", "AIBRIX_MIN_MATCH_PCT": "100"},
			check: func(k Knobs) bool {
				return k.PrefillLoadImbalanceMinSpread == 4 && k.DecodeScorePolicy == "least_request" && k.PromptLengthBucketing && k.MinMatchPct == 100
			}},
		{name: "params override env", env: map[string]string{"AIBRIX_DECODE_SCORE_RATIO_THRESHOLD": "3"}, raw: `{"decodeScoreRatioThreshold":2}`,
			check: func(k Knobs) bool { return k.DecodeScoreRatioThreshold == 2 }},
		{name: "unknown env prefill policy falls back", env: map[string]string{"AIBRIX_PREFILL_SCORE_POLICY": "magic"},
			check: func(k Knobs) bool { return k.PrefillScorePolicy == PrefillPrefixCache }, warns: 1},
		{name: "unknown env decode policy falls back", env: map[string]string{"AIBRIX_DECODE_SCORE_POLICY": "magic"},
			check: func(k Knobs) bool { return k.DecodeScorePolicy == DecodeLoadBalancing }, warns: 1},
		{name: "unknown param decode policy", raw: `{"decodeScorePolicy":"magic"}`, wantErr: "decodeScorePolicy"},
		{name: "unknown field", raw: `{"nope":1}`, wantErr: "nope"},
		{name: "env not a number", env: map[string]string{"AIBRIX_DECODE_LB_WEIGHT_RUNNING": "x"}, wantErr: "AIBRIX_DECODE_LB_WEIGHT_RUNNING"},
		{name: "min spread zero", raw: `{"prefillLoadImbalanceMinSpread":0}`, wantErr: "prefillLoadImbalanceMinSpread"},
		{name: "min spread over int32", raw: `{"prefillLoadImbalanceMinSpread":2147483648}`, wantErr: "prefillLoadImbalanceMinSpread"},
		{name: "ratio zero", raw: `{"decodeScoreRatioThreshold":0}`, wantErr: "decodeScoreRatioThreshold"},
		{name: "hybrid boundary 0 ok", raw: `{"hybridCacheLoadFactor":0}`, check: func(k Knobs) bool { return k.HybridCacheLoadFactor == 0 }},
		{name: "hybrid boundary 1 ok", raw: `{"hybridCacheLoadFactor":1}`, check: func(k Knobs) bool { return k.HybridCacheLoadFactor == 1 }},
		{name: "hybrid over 1", raw: `{"hybridCacheLoadFactor":1.01}`, wantErr: "hybridCacheLoadFactor"},
		{name: "min match over 100", raw: `{"minMatchPct":100.5}`, wantErr: "minMatchPct"},
		{name: "min match negative", raw: `{"minMatchPct":-1}`, wantErr: "minMatchPct"},
		{name: "tiktoken unsupported", raw: `{"prefixCacheTokenizerType":"tiktoken"}`, wantErr: "prefixCacheTokenizerType"},
		{name: "ttl zero allowed as a parameter", raw: `{"tokenLoadTTLSeconds":0}`,
			check: func(k Knobs) bool { return k.TokenLoadTTLSeconds != nil && *k.TokenLoadTTLSeconds == 0 }},
		// The environment takes the token-load variables with pd-token-ledger's ranges.
		{name: "ttl zero in env", env: map[string]string{"AIBRIX_TOKEN_LOAD_TTL_SECONDS": "0"}, wantErr: "AIBRIX_TOKEN_LOAD_TTL_SECONDS"},
		{name: "kv weight zero in env", env: map[string]string{"AIBRIX_TOKEN_LOAD_KV_WEIGHT": "0"}, wantErr: "AIBRIX_TOKEN_LOAD_KV_WEIGHT"},
		{name: "request cost negative in env", env: map[string]string{"AIBRIX_TOKEN_LOAD_REQUEST_COST": "-3"}, wantErr: "AIBRIX_TOKEN_LOAD_REQUEST_COST"},
		{name: "kv weight not a number in env", env: map[string]string{"AIBRIX_TOKEN_LOAD_KV_WEIGHT": "heavy"}, wantErr: `"heavy"): not a number`},
		{name: "token-load env read", env: map[string]string{"AIBRIX_TOKEN_LOAD_KV_WEIGHT": "0.5", "AIBRIX_TOKEN_LOAD_REQUEST_COST": "100",
			"AIBRIX_TOKEN_LOAD_TTL_SECONDS": "60", "AIBRIX_TOKEN_LOAD_SESSION_TTL_SECONDS": "0"},
			check: func(k Knobs) bool {
				return k.TokenLoadKVWeight == 0.5 && k.TokenLoadRequestCost == 100 && *k.TokenLoadTTLSeconds == 60 && *k.TokenLoadSessionTTLSeconds == 0
			}},
		{name: "ttl negative", raw: `{"tokenLoadTTLSeconds":-1}`, wantErr: "tokenLoadTTLSeconds"},
		{name: "bad bool env", env: map[string]string{"AIBRIX_BUCKET_SERVE": "yes please"}, wantErr: "AIBRIX_BUCKET_SERVE"},
		{name: "env not an integer", env: map[string]string{"AIBRIX_PREFIX_CACHE_BLOCK_SIZE": "16.5"}, wantErr: `prefixCacheBlockSize (env AIBRIX_PREFIX_CACHE_BLOCK_SIZE="16.5"): not an integer`},
		{name: "env not a boolean", env: map[string]string{"AIBRIX_PROMPT_LENGTH_BUCKETING": "on"}, wantErr: `promptLengthBucketing (env AIBRIX_PROMPT_LENGTH_BUCKETING="on"): not a boolean`},
		{name: "unknown mode env falls back", env: map[string]string{"AIBRIX_BUCKET_SERVE_MODE": "fast"},
			check: func(k Knobs) bool { return k.BucketServeMode == ModeThroughput }, warns: 1},
		{name: "bad mode param", raw: `{"bucketServeMode":"fast"}`, wantErr: "bucketServeMode"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			warns := 0
			k, err := Load("aibrix-x", "my-plugin", json.RawMessage(tt.raw), env(tt.env), func(string) { warns++ })
			if plugintest.WantErr(t, err, tt.wantErr, "my-plugin") {
				return
			}
			if !tt.check(k) {
				t.Fatalf("unexpected knobs %+v", k)
			}
			if warns != tt.warns {
				t.Fatalf("warns %d want %d", warns, tt.warns)
			}
		})
	}
}

func TestForProfile(t *testing.T) {
	base := Defaults()
	cfg, err := podmodel.ParseConfig(`{"profiles":{
	  "a":{"routingConfig":{"promptLengthBucketing":true,"bucketServe":true,"bucketServeMode":"RPS",
	     "prefillScorePolicy":"least_request","decodeScorePolicy":"conductor","prefixCache":{"standardDeviationFactor":3},
	     "pd":{"prefillLoadImbalanceMinSpread":4,"decodeScoreRatioThreshold":2.5,"minMatchPct":150,"hybridCacheLoadFactor":"x",
	           "tokenLoadTTLSeconds":0,"prefillRequestTimeout":5,"bogus":1,"decodeLBWeightRunning":-1}}},
	  "b":{"routingConfig":{"prefillScorePolicy":"nope"}},
	  "c":{"routingConfig":{"decodeScorePolicy":"nope"}},
	  "d":{"routingConfig":{"bucketServeMode":"weird","pd":{"prefillLoadImbalanceMinSpread":2.5}}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	warned.Clear() // the dedupe is per process; -count and test order must not matter
	var warns []string
	w := func(s string) { warns = append(warns, s) }
	_, pa := cfg.Resolve("a", podmodel.AutoHints{})
	k, err := base.ForProfile(pa, w)
	if err != nil {
		t.Fatal(err)
	}
	if !k.PromptLengthBucketing || !k.BucketServe || k.BucketServeMode != ModeRPS || k.PrefillScorePolicy != "least_request" ||
		k.DecodeScorePolicy != "conductor" || k.PrefixCacheStandardDeviationFactor != 3 || k.PrefillLoadImbalanceMinSpread != 4 ||
		k.DecodeScoreRatioThreshold != 2.5 || k.MinMatchPct != 0 || k.HybridCacheLoadFactor != 0.5 ||
		k.TokenLoadTTLSeconds == nil || *k.TokenLoadTTLSeconds != 0 || k.DecodeLBWeightRunning != 1 {
		t.Fatalf("%+v", k)
	}
	if len(warns) != 4 { // minMatchPct, hybridCacheLoadFactor, bogus, decodeLBWeightRunning
		t.Fatalf("warns %v", warns)
	}
	// The same invalid values warn only once.
	if _, err := base.ForProfile(pa, w); err != nil || len(warns) != 4 {
		t.Fatalf("second pass warned again: %v", warns)
	}
	_, pb := cfg.Resolve("b", podmodel.AutoHints{})
	if k, err := base.ForProfile(pb, w); err != nil || k.PrefillScorePolicy != PrefillPrefixCache {
		t.Fatalf("unknown prefill policy must keep default: %+v %v", k, err)
	}
	_, pc := cfg.Resolve("c", podmodel.AutoHints{})
	if _, err := base.ForProfile(pc, w); err == nil {
		t.Fatal("unknown decode policy must fail")
	}
	_, pd := cfg.Resolve("d", podmodel.AutoHints{})
	if k, err := base.ForProfile(pd, w); err != nil || k.BucketServeMode != ModeThroughput || k.PrefillLoadImbalanceMinSpread != 16 {
		t.Fatalf("%+v %v", k, err)
	}
	if k, err := base.ForProfile(nil, w); err != nil || k != base {
		t.Fatal("nil profile must return the plugin knobs")
	}
}

// ForRequest resolves the header against the model config and keeps the plugin's knobs
// wherever ForProfile would have nothing to apply or would fail.
func TestForRequest(t *testing.T) {
	base := Defaults()
	cfg, err := podmodel.ParseConfig(`{"defaultProfile":"lr","profiles":{
	  "lr":{"routingConfig":{"decodeScorePolicy":"least_request"}},
	  "cond":{"routingConfig":{"decodeScorePolicy":"conductor","prefixCache":{"standardDeviationFactor":3}}},
	  "bad":{"routingConfig":{"decodeScorePolicy":"nope"}}}}`)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, header string
		cfg          *podmodel.ModelConfig
		want         Knobs
	}{
		{name: "named profile", header: "cond", cfg: cfg, want: func() Knobs {
			k := base
			k.DecodeScorePolicy, k.PrefixCacheStandardDeviationFactor = DecodeConductor, 3
			return k
		}()},
		{name: "no header: the default profile", cfg: cfg, want: func() Knobs { k := base; k.DecodeScorePolicy = DecodeLeastRequest; return k }()},
		{name: "auto: the default profile", header: podmodel.ProfileAuto, cfg: cfg, want: func() Knobs { k := base; k.DecodeScorePolicy = DecodeLeastRequest; return k }()},
		{name: "refused override keeps the plugin's knobs", header: "bad", cfg: cfg, want: base},
		{name: "no model config", header: "cond", want: base},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := base.ForRequest(tt.cfg, tt.header); got != tt.want {
				t.Fatalf("got %+v\nwant %+v", got, tt.want)
			}
		})
	}
}

func FuzzForProfile(f *testing.F) {
	f.Add(`{"profiles":{"default":{"routingConfig":{"pd":{"minMatchPct":50,"decodeScoreRatioThreshold":"x"}}}}}`)
	f.Add(`{"profiles":{"default":{"routingConfig":{"decodeScorePolicy":"conductor","bucketServeMode":"rps"}}}}`)
	f.Fuzz(func(t *testing.T, raw string) {
		cfg, err := podmodel.ParseConfig(raw)
		if err != nil {
			return
		}
		_, prof := cfg.Resolve("", podmodel.AutoHints{MaxTokens: -1})
		k, err := Defaults().ForProfile(prof, nil)
		if err != nil {
			return
		}
		// Whatever a profile says, the effective knobs stay valid.
		if err := k.Validate(); err != nil {
			t.Fatalf("profile produced invalid knobs: %v", err)
		}
	})
}

// An unparsable token-load variable is reported once, as not a number (not also as out of range).
func TestTokenLoadEnvReportedOnce(t *testing.T) {
	_, err := Load("aibrix-x", "p", nil, env(map[string]string{"AIBRIX_TOKEN_LOAD_KV_WEIGHT": "heavy"}), nil)
	if err == nil || strings.Count(err.Error(), "AIBRIX_TOKEN_LOAD_KV_WEIGHT") != 1 {
		t.Fatalf("error %v", err)
	}
}
