package pdpair

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/pdgate/pdgate/plugins/pdknobs"
)

// Own parameters of aibrix-pd-pair (the AIBrix knobs of plugins/pdknobs sit next to them).
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
	// Seed fixes random tie-breaks (tests); 0 = time-based.
	Seed int64 `json:"seed"`
}

var ownKeys = []string{"ledgerRef", "prefillDeciderRef", "combinedOverflow", "defaultRoutingStrategy", "honorRoutingStrategyHeader", "trackerTTLSeconds", "prefixTableCapacity", "seed"}

// Params are aibrix-pd-pair's parameters.
type Params struct {
	ownParams
	Knobs pdknobs.Knobs
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

// ParseParams splits the raw parameters into the plugin's own fields and the AIBrix knobs.
func ParseParams(plugin string, raw json.RawMessage, getenv pdknobs.Getenv, warn func(string)) (Params, error) {
	p := Params{ownParams: ownParams{LedgerRef: "pd-token-ledger", DefaultRoutingStrategy: StrategyPD,
		TrackerTTLSeconds: 120, PrefixTableCapacity: 1 << 20}}
	var rest json.RawMessage
	if len(raw) > 0 && string(raw) != "null" {
		var all map[string]json.RawMessage
		if err := json.Unmarshal(raw, &all); err != nil {
			return Params{}, fmt.Errorf("%s: invalid parameters: %w", plugin, err)
		}
		own := map[string]json.RawMessage{}
		for _, k := range ownKeys {
			if v, ok := all[k]; ok {
				own[k] = v
				delete(all, k)
			}
		}
		b, _ := json.Marshal(own)
		if err := json.Unmarshal(b, &p.ownParams); err != nil {
			return Params{}, fmt.Errorf("%s: invalid parameters: %w", plugin, err)
		}
		rest, _ = json.Marshal(all)
	}
	k, err := pdknobs.Load(plugin, rest, getenv, warn)
	if err != nil {
		return Params{}, err
	}
	p.Knobs = k
	p.DefaultRoutingStrategy = strings.ToLower(p.DefaultRoutingStrategy)
	switch {
	case !contains(KnownStrategies, p.DefaultRoutingStrategy):
		return Params{}, fmt.Errorf("%s: parameter defaultRoutingStrategy=%q: must be one of %s", plugin, p.DefaultRoutingStrategy, strings.Join(KnownStrategies, ", "))
	case p.LedgerRef == "":
		return Params{}, fmt.Errorf("%s: parameter ledgerRef: must not be empty", plugin)
	case p.TrackerTTLSeconds <= 0:
		return Params{}, fmt.Errorf("%s: parameter trackerTTLSeconds=%d: must be > 0", plugin, p.TrackerTTLSeconds)
	case p.PrefixTableCapacity <= 0:
		return Params{}, fmt.Errorf("%s: parameter prefixTableCapacity=%d: must be > 0", plugin, p.PrefixTableCapacity)
	}
	return p, nil
}

// HonorHeader reports whether the routing-strategy header is honoured (default true).
func (p Params) HonorHeader() bool {
	return p.HonorRoutingStrategyHeader == nil || *p.HonorRoutingStrategyHeader
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
