// Package pdknobs holds the AIBrix PD scheduling knobs: one typed struct with AIBrix's
// defaults, the AIBRIX_* environment variables read as defaults when set, validation with clear
// errors, and the per-request overrides from a model.aibrix.ai/config profile
// (routingConfig flat fields and routingConfig.pd.<field>).
package pdknobs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Prefill and decode policy names.
const (
	PrefillPrefixCache     = "prefix_cache"
	PrefillLeastRequest    = "least_request"
	PrefillConductor       = "conductor"
	PrefillTokenLoad       = "token_load"
	PrefillHybridCacheLoad = "hybrid_cache_load"

	DecodeLoadBalancing = "load_balancing"
	DecodeLeastRequest  = "least_request"
	DecodeConductor     = "conductor"
	DecodeTokenLoad     = "token_load"
)

// Bucket-serve modes.
const (
	ModeThroughput = "throughput"
	ModeRPS        = "rps"
)

// PrefillPolicies and DecodePolicies are the accepted policy names.
var (
	PrefillPolicies = []string{PrefillPrefixCache, PrefillLeastRequest, PrefillConductor, PrefillTokenLoad, PrefillHybridCacheLoad}
	DecodePolicies  = []string{DecodeLoadBalancing, DecodeLeastRequest, DecodeConductor, DecodeTokenLoad}
)

// Knobs are the scheduling parameters. JSON names are the plugin parameter names.
type Knobs struct {
	PrefillScorePolicy                 string  `json:"prefillScorePolicy"`
	DecodeScorePolicy                  string  `json:"decodeScorePolicy"`
	PromptLengthBucketing              bool    `json:"promptLengthBucketing"`
	BucketServe                        bool    `json:"bucketServe"`
	BucketServeMode                    string  `json:"bucketServeMode"`
	PrefillLoadImbalanceMinSpread      int     `json:"prefillLoadImbalanceMinSpread"`
	DecodeLoadImbalanceMinSpread       float64 `json:"decodeLoadImbalanceMinSpread"`
	DecodeThroughputImbalanceMinSpread float64 `json:"decodeThroughputImbalanceMinSpread"`
	DecodeScoreRatioThreshold          float64 `json:"decodeScoreRatioThreshold"`
	DecodeLBWeightRunning              float64 `json:"decodeLBWeightRunning"`
	DecodeLBWeightThroughput           float64 `json:"decodeLBWeightThroughput"`
	HybridCacheLoadFactor              float64 `json:"hybridCacheLoadFactor"`
	MinMatchPct                        float64 `json:"minMatchPct"`
	PrefixCacheStandardDeviationFactor int     `json:"prefixCacheStandardDeviationFactor"`
	PrefixCacheBlockSize               int     `json:"prefixCacheBlockSize"`
	PrefixCacheTokenizerType           string  `json:"prefixCacheTokenizerType"`
	// Token-load knobs: 0 = use the ledger owner's value (pd-token-ledger parameters).
	TokenLoadKVWeight          float64 `json:"tokenLoadKVWeight"`
	TokenLoadRequestCost       float64 `json:"tokenLoadRequestCost"`
	TokenLoadTTLSeconds        *int    `json:"tokenLoadTTLSeconds,omitempty"`
	TokenLoadSessionTTLSeconds *int    `json:"tokenLoadSessionTTLSeconds,omitempty"`
}

// EnvVar maps each parameter to its AIBrix environment variable.
var EnvVar = map[string]string{
	"prefillScorePolicy":                 "AIBRIX_PREFILL_SCORE_POLICY",
	"decodeScorePolicy":                  "AIBRIX_DECODE_SCORE_POLICY",
	"promptLengthBucketing":              "AIBRIX_PROMPT_LENGTH_BUCKETING",
	"bucketServe":                        "AIBRIX_BUCKET_SERVE",
	"bucketServeMode":                    "AIBRIX_BUCKET_SERVE_MODE",
	"prefillLoadImbalanceMinSpread":      "AIBRIX_PREFILL_LOAD_IMBALANCE_MIN_SPREAD",
	"decodeLoadImbalanceMinSpread":       "AIBRIX_DECODE_LOAD_IMBALANCE_MIN_SPREAD",
	"decodeThroughputImbalanceMinSpread": "AIBRIX_DECODE_THROUGHPUT_IMBALANCE_MIN_SPREAD",
	"decodeScoreRatioThreshold":          "AIBRIX_DECODE_SCORE_RATIO_THRESHOLD",
	"decodeLBWeightRunning":              "AIBRIX_DECODE_LB_WEIGHT_RUNNING",
	"decodeLBWeightThroughput":           "AIBRIX_DECODE_LB_WEIGHT_THROUGHPUT",
	"hybridCacheLoadFactor":              "AIBRIX_HYBRID_CACHE_LOAD_FACTOR",
	"minMatchPct":                        "AIBRIX_MIN_MATCH_PCT",
	"prefixCacheStandardDeviationFactor": "AIBRIX_PREFIX_CACHE_STANDARD_DEVIATION_FACTOR",
	"prefixCacheBlockSize":               "AIBRIX_PREFIX_CACHE_BLOCK_SIZE",
	"prefixCacheTokenizerType":           "AIBRIX_PREFIX_CACHE_TOKENIZER_TYPE",
	"tokenLoadKVWeight":                  "AIBRIX_TOKEN_LOAD_KV_WEIGHT",
	"tokenLoadRequestCost":               "AIBRIX_TOKEN_LOAD_REQUEST_COST",
	"tokenLoadTTLSeconds":                "AIBRIX_TOKEN_LOAD_TTL_SECONDS",
	"tokenLoadSessionTTLSeconds":         "AIBRIX_TOKEN_LOAD_SESSION_TTL_SECONDS",
}

// Defaults returns AIBrix's built-in defaults (no environment).
func Defaults() Knobs {
	return Knobs{
		PrefillScorePolicy:                 PrefillPrefixCache,
		DecodeScorePolicy:                  DecodeLoadBalancing,
		BucketServeMode:                    ModeThroughput,
		PrefillLoadImbalanceMinSpread:      16,
		DecodeLoadImbalanceMinSpread:       16,
		DecodeThroughputImbalanceMinSpread: 2048,
		DecodeScoreRatioThreshold:          1.5,
		DecodeLBWeightRunning:              1,
		DecodeLBWeightThroughput:           1,
		HybridCacheLoadFactor:              0.5,
		MinMatchPct:                        0,
		PrefixCacheStandardDeviationFactor: 1,
		PrefixCacheBlockSize:               4,
		PrefixCacheTokenizerType:           "character",
	}
}

// Load builds the knobs for a plugin: defaults, then each AIBRIX_* variable that is set
// (FromEnv), then the plugin's JSON parameters through pluginkit.Decode, then Validate.
// Unknown parameter fields, invalid values (from either source) are errors naming the plugin
// and the field. An unknown prefill policy from the environment falls back to prefix_cache
// with a warning (AIBrix does the same); warn receives it.
func Load(pluginType, name string, raw json.RawMessage, env pluginkit.Env, warn func(string)) (Knobs, error) {
	k, err := FromEnv(env, warn)
	if err != nil {
		return Knobs{}, pluginkit.Errorf(pluginType, name, "%w", err)
	}
	if err := pluginkit.Decode(pluginType, name, raw, &k); err != nil {
		return Knobs{}, err
	}
	return k, nil
}

// FromEnv returns the defaults with each AIBRIX_* variable of env that is set applied (nil env:
// the process environment). Plugins that embed the knobs in their own parameters start from
// it, then decode their parameters over it.
func FromEnv(env pluginkit.Env, warn func(string)) (Knobs, error) {
	if warn == nil {
		warn = func(string) {}
	}
	k := Defaults()
	if err := k.applyEnv(env.OrOS(), warn); err != nil {
		return Knobs{}, err
	}
	return k, nil
}

func (k *Knobs) applyEnv(getenv pluginkit.Env, warn func(string)) error {
	str := func(field string, dst *string) {
		if v, ok := getenv(EnvVar[field]); ok && strings.TrimSpace(v) != "" {
			*dst = strings.ToLower(strings.TrimSpace(v))
		}
	}
	var errs []error // errors.Join drops the nil ones
	num := func(field string, dst *float64) {
		errs = append(errs, parseEnv(getenv, field, dst, "a number", func(s string) (float64, error) { return strconv.ParseFloat(s, 64) }))
	}
	integer := func(field string, dst *int) {
		errs = append(errs, parseEnv(getenv, field, dst, "an integer", strconv.Atoi))
	}
	boolean := func(field string, dst *bool) {
		errs = append(errs, parseEnv(getenv, field, dst, "a boolean", strconv.ParseBool))
	}
	str("prefillScorePolicy", &k.PrefillScorePolicy)
	if !slices.Contains(PrefillPolicies, k.PrefillScorePolicy) {
		warn(fmt.Sprintf("unknown %s=%q, using %s", EnvVar["prefillScorePolicy"], k.PrefillScorePolicy, PrefillPrefixCache))
		k.PrefillScorePolicy = PrefillPrefixCache
	}
	str("decodeScorePolicy", &k.DecodeScorePolicy)
	if !slices.Contains(DecodePolicies, k.DecodeScorePolicy) {
		warn(fmt.Sprintf("unknown %s=%q, using %s", EnvVar["decodeScorePolicy"], k.DecodeScorePolicy, DecodeLoadBalancing))
		k.DecodeScorePolicy = DecodeLoadBalancing
	}
	boolean("promptLengthBucketing", &k.PromptLengthBucketing)
	boolean("bucketServe", &k.BucketServe)
	str("bucketServeMode", &k.BucketServeMode)
	if k.BucketServeMode != ModeThroughput && k.BucketServeMode != ModeRPS {
		warn(fmt.Sprintf("unknown %s=%q, using %s", EnvVar["bucketServeMode"], k.BucketServeMode, ModeThroughput))
		k.BucketServeMode = ModeThroughput
	}
	integer("prefillLoadImbalanceMinSpread", &k.PrefillLoadImbalanceMinSpread)
	num("decodeLoadImbalanceMinSpread", &k.DecodeLoadImbalanceMinSpread)
	num("decodeThroughputImbalanceMinSpread", &k.DecodeThroughputImbalanceMinSpread)
	num("decodeScoreRatioThreshold", &k.DecodeScoreRatioThreshold)
	num("decodeLBWeightRunning", &k.DecodeLBWeightRunning)
	num("decodeLBWeightThroughput", &k.DecodeLBWeightThroughput)
	num("hybridCacheLoadFactor", &k.HybridCacheLoadFactor)
	num("minMatchPct", &k.MinMatchPct)
	integer("prefixCacheStandardDeviationFactor", &k.PrefixCacheStandardDeviationFactor)
	integer("prefixCacheBlockSize", &k.PrefixCacheBlockSize)
	str("prefixCacheTokenizerType", &k.PrefixCacheTokenizerType)
	// The token-load variables are also pd-token-ledger's; the environment takes them with
	// the ledger's (AIBrix's env loader's) ranges, so one value never means two things: weight
	// and cost > 0, TTL > 0 (0 = never swept is a per-request/parameter value only), session
	// TTL >= 0.
	envAtLeast := func(field string, v float64, minimum float64, rule string) {
		raw, ok := getenv(EnvVar[field])
		if !ok || strings.TrimSpace(raw) == "" {
			return
		}
		if _, err := strconv.ParseFloat(strings.TrimSpace(raw), 64); err != nil {
			return // already reported as not a number
		}
		if v < minimum {
			errs = append(errs, fmt.Errorf("%s (env %s=%q): must be %s", field, EnvVar[field], raw, rule))
		}
	}
	num("tokenLoadKVWeight", &k.TokenLoadKVWeight)
	envAtLeast("tokenLoadKVWeight", k.TokenLoadKVWeight, math.SmallestNonzeroFloat64, "> 0")
	num("tokenLoadRequestCost", &k.TokenLoadRequestCost)
	envAtLeast("tokenLoadRequestCost", k.TokenLoadRequestCost, math.SmallestNonzeroFloat64, "> 0")
	var ttl, sttl int
	if v, ok := getenv(EnvVar["tokenLoadTTLSeconds"]); ok && strings.TrimSpace(v) != "" {
		integer("tokenLoadTTLSeconds", &ttl)
		envAtLeast("tokenLoadTTLSeconds", float64(ttl), 1, "an integer > 0")
		k.TokenLoadTTLSeconds = &ttl
	}
	if v, ok := getenv(EnvVar["tokenLoadSessionTTLSeconds"]); ok && strings.TrimSpace(v) != "" {
		integer("tokenLoadSessionTTLSeconds", &sttl)
		k.TokenLoadSessionTTLSeconds = &sttl
	}
	return errors.Join(errs...)
}

// parseEnv sets *dst from field's AIBRIX_* variable when it is set and not blank. A value parse
// rejects leaves *dst as it was and is an error saying the variable is not what.
func parseEnv[T any](getenv pluginkit.Env, field string, dst *T, what string, parse func(string) (T, error)) error {
	v, ok := getenv(EnvVar[field])
	if !ok || strings.TrimSpace(v) == "" {
		return nil
	}
	x, err := parse(strings.TrimSpace(v))
	if err != nil {
		return fmt.Errorf("%s (env %s=%q): not %s", field, EnvVar[field], v, what)
	}
	*dst = x
	return nil
}

// Validate checks every field against AIBrix's accepted ranges.
func (k Knobs) Validate() error {
	var errs []error
	bad := func(field, rule string, v any) {
		errs = append(errs, fmt.Errorf("parameter %s=%v: must be %s", field, v, rule))
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if !slices.Contains(PrefillPolicies, k.PrefillScorePolicy) {
		bad("prefillScorePolicy", "one of "+strings.Join(PrefillPolicies, ", "), k.PrefillScorePolicy)
	}
	if !slices.Contains(DecodePolicies, k.DecodeScorePolicy) {
		bad("decodeScorePolicy", "one of "+strings.Join(DecodePolicies, ", "), k.DecodeScorePolicy)
	}
	if k.BucketServeMode != ModeThroughput && k.BucketServeMode != ModeRPS {
		bad("bucketServeMode", "throughput or rps", k.BucketServeMode)
	}
	if k.PrefillLoadImbalanceMinSpread <= 0 || k.PrefillLoadImbalanceMinSpread > math.MaxInt32 {
		bad("prefillLoadImbalanceMinSpread", "an int32 > 0", k.PrefillLoadImbalanceMinSpread)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{
		{"decodeLoadImbalanceMinSpread", k.DecodeLoadImbalanceMinSpread},
		{"decodeThroughputImbalanceMinSpread", k.DecodeThroughputImbalanceMinSpread},
		{"decodeScoreRatioThreshold", k.DecodeScoreRatioThreshold},
		{"decodeLBWeightRunning", k.DecodeLBWeightRunning},
		{"decodeLBWeightThroughput", k.DecodeLBWeightThroughput},
	} {
		if !finite(f.v) || f.v <= 0 {
			bad(f.name, "a finite number > 0", f.v)
		}
	}
	if !finite(k.HybridCacheLoadFactor) || k.HybridCacheLoadFactor < 0 || k.HybridCacheLoadFactor > 1 {
		bad("hybridCacheLoadFactor", "in [0,1]", k.HybridCacheLoadFactor)
	}
	if !finite(k.MinMatchPct) || k.MinMatchPct < 0 || k.MinMatchPct > 100 {
		bad("minMatchPct", "in [0,100]", k.MinMatchPct)
	}
	if k.PrefixCacheStandardDeviationFactor <= 0 {
		bad("prefixCacheStandardDeviationFactor", "a positive integer", k.PrefixCacheStandardDeviationFactor)
	}
	if k.PrefixCacheBlockSize <= 0 {
		bad("prefixCacheBlockSize", "a positive integer", k.PrefixCacheBlockSize)
	}
	if k.PrefixCacheTokenizerType != "character" {
		bad("prefixCacheTokenizerType", `"character" (tiktoken is not available in pdgate)`, k.PrefixCacheTokenizerType)
	}
	if !finite(k.TokenLoadKVWeight) || k.TokenLoadKVWeight < 0 {
		bad("tokenLoadKVWeight", "> 0 (0 = the ledger's value)", k.TokenLoadKVWeight)
	}
	if !finite(k.TokenLoadRequestCost) || k.TokenLoadRequestCost < 0 {
		bad("tokenLoadRequestCost", "> 0 (0 = the ledger's value)", k.TokenLoadRequestCost)
	}
	if k.TokenLoadTTLSeconds != nil && *k.TokenLoadTTLSeconds < 0 {
		bad("tokenLoadTTLSeconds", ">= 0", *k.TokenLoadTTLSeconds)
	}
	if k.TokenLoadSessionTTLSeconds != nil && *k.TokenLoadSessionTTLSeconds < 0 {
		bad("tokenLoadSessionTTLSeconds", ">= 0", *k.TokenLoadSessionTTLSeconds)
	}
	return errors.Join(errs...)
}
