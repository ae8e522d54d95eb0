package aibrixpdpair

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"sort"
	"strings"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
)

// Own parameters of aibrix-pd-pair (the AIBrix knobs of plugins/lib/pdknobs sit next to them).
type ownParams struct {
	// LedgerRef names the pd-token-ledger plugin instance (looked up at first use).
	LedgerRef string `json:"ledgerRef"`
	// PrefillDeciderRef names a prefill decider (contract.Decider, e.g.
	// prefix-based-pd-decider) asked about the pair's decode pod before the pick is
	// registered; "" keeps AIBrix's rule (every pair gets its prefill leg).
	PrefillDeciderRef string `json:"prefillDeciderRef"`
	// CombinedOverflow sends whole requests to combined pods when the P/D tier is hot (AIBrix's
	// overflow rule) without prompt-length bucketing too; AIBrix applies it only with
	// bucketing, so without it a hybrid fleet's combined pods serve only when no pair exists.
	CombinedOverflow bool `json:"combinedOverflow"`
	// DecodeFirst weighs the decode side of the pair score more while prefill has room (see
	// DecodeFirst); nil keeps AIBrix's equal sum.
	DecodeFirst *DecodeFirst `json:"decodeFirst,omitempty"`
	// RemainingWork routes on the prefill work left after the best reusable cache (see
	// RemainingWork); nil keeps AIBrix's scores.
	RemainingWork *RemainingWork `json:"remainingWork,omitempty"`
	// DefaultRoutingStrategy applies when neither lockedRoutingStrategy, the routing-strategy
	// header nor the profile's routingStrategy name one (AIBrix's ROUTING_ALGORITHM).
	DefaultRoutingStrategy string `json:"defaultRoutingStrategy"`
	// HonorRoutingStrategyHeader lets clients choose a strategy with routing-strategy.
	HonorRoutingStrategyHeader *bool `json:"honorRoutingStrategyHeader"`
	// TrackerTTLSeconds force-releases in-flight prefill / pending decode counts of requests
	// whose response never reached the EPP.
	TrackerTTLSeconds int `json:"trackerTTLSeconds"`
	// PrefixTableCapacity bounds the prefix table ((block, pod) entries).
	PrefixTableCapacity int `json:"prefixTableCapacity"`
	// Seed fixes random tie-breaks (tests); 0 = the EPP's seed when it has one
	// (pluginkit.WithSeed, `pdgate bench sim --seed`), else time-based.
	Seed int64 `json:"seed"`
}

// DecodeFirst makes the pair score regime-aware. With rolesets of one prefill and one decode
// pod, AIBrix's prefill/maxPrefill + decode/maxDecode trades one side against the other at a
// fixed rate, but which side binds depends on the load: while the prefill queues are short the
// decode pods' TPOT decides whether a request meets its SLO, once they are long the prefill
// wait does. So while the candidate pairs' prefill scores at Quantile are below
// PrefillScoreBelow, the pair minimising prefill/maxPrefill + Weight·decode/maxDecode wins;
// otherwise AIBrix's equal sum does.
type DecodeFirst struct {
	// Weight multiplies decode/maxDecode (> 0; 1 = AIBrix's sum).
	Weight float64 `json:"weight"`
	// PrefillScoreBelow is the prefill score (in the prefill policy's units: tokens of prefill
	// work in flight under token_load) below which decode goes first (> 0).
	PrefillScoreBelow float64 `json:"prefillScoreBelow"`
	// Quantile of the candidate pairs' prefill scores that is compared with PrefillScoreBelow,
	// in [0, 1]; nil = 0, the least loaded prefill pod. A higher quantile returns to the equal
	// sum sooner, trading TPOT-bound goodput for prefill wait (README).
	Quantile *float64 `json:"quantile,omitempty"`
}

// DefaultDecodeFirstQuantile is DecodeFirst.Quantile's default: the least loaded prefill pod.
const DefaultDecodeFirstQuantile = 0.0

// weight returns the pair score's decode weight and the quantile it was decided on, for the
// candidate pairs' prefill scores (sorted in place unless the quantile is 0).
func (f *DecodeFirst) weight(prefillScores []float64) (w, at float64) {
	if f == nil || len(prefillScores) == 0 {
		return 1, math.NaN()
	}
	q := DefaultDecodeFirstQuantile
	if f.Quantile != nil {
		q = *f.Quantile
	}
	if q == 0 {
		at = slices.Min(prefillScores) // no sort on the default path
	} else {
		sort.Float64s(prefillScores)
		at = prefillScores[int(q*float64(len(prefillScores)-1))]
	}
	if at < f.PrefillScoreBelow {
		return f.Weight, at
	}
	return 1, at
}

// Params are aibrix-pd-pair's parameters: its own fields and the AIBrix knobs side by side in
// one object, decoded strictly in one pass (both embedded structs' fields are declared).
type Params struct {
	ownParams
	handoffParams // compat.go
	pdknobs.Knobs
}

// Strategies an EPP can honour (see README).
const (
	StrategyPD           = "pd"
	StrategyRandom       = "random"
	StrategyLeastRequest = "least-request"
	StrategyLeastKVCache = "least-kv-cache"
)

// KnownStrategies lists the routing-strategy values pdgate implements.
var KnownStrategies = []string{StrategyPD, StrategyRandom, StrategyLeastRequest, StrategyLeastKVCache}

// ParseParams builds the parameters: defaults, the AIBRIX_* variables of env over the knobs'
// defaults, the raw parameters (pluginkit.Decode), then Validate.
func ParseParams(pluginType, name string, raw json.RawMessage, env pluginkit.Env, warn func(string)) (Params, error) {
	k, err := pdknobs.FromEnv(env, warn)
	if err != nil {
		return Params{}, pluginkit.Errorf(pluginType, name, "%w", err)
	}
	p := Params{ownParams: ownParams{LedgerRef: "pd-token-ledger", DefaultRoutingStrategy: StrategyPD,
		TrackerTTLSeconds: 120, PrefixTableCapacity: 1 << 20}, Knobs: k}
	if err := pluginkit.Decode(pluginType, name, raw, &p); err != nil {
		return Params{}, err
	}
	p.DefaultRoutingStrategy = strings.ToLower(p.DefaultRoutingStrategy)
	return p, nil
}

// Validate checks the knobs and the plugin's own fields.
func (p Params) Validate() error {
	if err := p.Knobs.Validate(); err != nil {
		return err
	}
	switch {
	case !slices.Contains(KnownStrategies, strings.ToLower(p.DefaultRoutingStrategy)):
		return fmt.Errorf("parameter defaultRoutingStrategy=%q: must be one of %s", p.DefaultRoutingStrategy, strings.Join(KnownStrategies, ", "))
	case p.LedgerRef == "":
		return fmt.Errorf("parameter ledgerRef: must not be empty")
	case p.TrackerTTLSeconds <= 0:
		return fmt.Errorf("parameter trackerTTLSeconds=%d: must be > 0", p.TrackerTTLSeconds)
	case p.PrefixTableCapacity <= 0:
		return fmt.Errorf("parameter prefixTableCapacity=%d: must be > 0", p.PrefixTableCapacity)
	case p.DecodeFirst != nil && !(p.DecodeFirst.Weight > 0 && !math.IsInf(p.DecodeFirst.Weight, 0)):
		return fmt.Errorf("parameter decodeFirst.weight=%g: must be a finite number > 0", p.DecodeFirst.Weight)
	case p.DecodeFirst != nil && !(p.DecodeFirst.PrefillScoreBelow > 0 && !math.IsInf(p.DecodeFirst.PrefillScoreBelow, 0)):
		return fmt.Errorf("parameter decodeFirst.prefillScoreBelow=%g: must be a finite number > 0", p.DecodeFirst.PrefillScoreBelow)
	case p.RemainingWork != nil && p.RemainingWork.LocalPrefillMaxTokens < 0:
		return fmt.Errorf("parameter remainingWork.localPrefillMaxTokens=%d: must be >= 0 (0 = %d)", p.RemainingWork.LocalPrefillMaxTokens, DefaultLocalPrefillMaxTokens)
	case p.RemainingWork != nil && p.RemainingWork.DecodeWeight != nil && !(*p.RemainingWork.DecodeWeight >= 0 && !math.IsInf(*p.RemainingWork.DecodeWeight, 1)):
		return fmt.Errorf("parameter remainingWork.decodeWeight=%g: must be a finite number >= 0", *p.RemainingWork.DecodeWeight)
	case p.RemainingWork != nil && p.Knobs.PrefillScorePolicy != pdknobs.PrefillTokenLoad && p.Knobs.PrefillScorePolicy != pdknobs.PrefillHybridCacheLoad:
		return fmt.Errorf("parameter remainingWork: needs prefillScorePolicy %s or %s (its costs are ledger tokens), got %q",
			pdknobs.PrefillTokenLoad, pdknobs.PrefillHybridCacheLoad, p.Knobs.PrefillScorePolicy)
	case p.RemainingWork != nil && p.RemainingWork.PrefillBackedUp != nil && p.RemainingWork.PrefillBackedUp.validate() != nil:
		return p.RemainingWork.PrefillBackedUp.validate()
	case p.handoffParams.validate() != nil:
		return p.handoffParams.validate()
	case p.DecodeFirst != nil && p.DecodeFirst.Quantile != nil && !(*p.DecodeFirst.Quantile >= 0 && *p.DecodeFirst.Quantile <= 1):
		return fmt.Errorf("parameter decodeFirst.quantile=%g: must be in [0, 1]", *p.DecodeFirst.Quantile)
	}
	return nil
}

// HonorHeader reports whether the routing-strategy header is honoured (default true).
func (p Params) HonorHeader() bool {
	return p.HonorRoutingStrategyHeader == nil || *p.HonorRoutingStrategyHeader
}
