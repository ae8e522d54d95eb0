// Package tokenload is the contract of the token-load ledger that the token_load and
// hybrid_cache_load policies read: per-pod prefill (active, kv) and decode token charges. The
// pd-token-ledger plugin (plugins/requestcontrol/pdtokenledger) implements it; aibrix-pd-pair programs against
// it, so neither plugin imports the other. Selection code must read the ledger and charge its pick inside one
// Ledger.Atomically call, so that a burst of concurrent requests sees each other's picks.
package tokenload

import (
	"fmt"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
)

// PodKey identifies a pod across the ledger, the metrics and Redis: "namespace/name".
type PodKey string

// PrefillLoad is a pod's prefill ledger state.
type PrefillLoad struct {
	ActiveTokens float64 // tokens being prefilled now
	KVTokens     float64 // tokens whose KV stays resident on the prefill pod until completion
}

// Priority is the token_load prefill score (lower is better): active + kvWeight·kv.
func (p PrefillLoad) Priority(kvWeight float64) float64 { return p.ActiveTokens + kvWeight*p.KVTokens }

// DecodeRate tells the ledger a decode pod's per-request generation rate (tokens/s) for the
// growth estimate; ok=false when the pod has no usable metrics (mean of measured pods is used).
type DecodeRate func(pod PodKey) (tokensPerSecond float64, ok bool)

// PrefillCharge describes one prefill charge. Tokens is request cost + new tokens, computed by
// the caller with NewTokens.
type PrefillCharge struct {
	RequestID string
	Pod       PodKey
	Tokens    float64
	TTL       time.Duration // 0 = never force-released
}

// DecodeCharge describes one decode charge: the prompt tokens the decode pod receives and,
// when the charger knows it, the sequence's output budget (max_tokens; 0 = unknown; pd-token-ledger
// records it when the request is scheduled).
type DecodeCharge struct {
	RequestID    string
	Pod          PodKey
	Tokens       float64
	OutputTokens float64
	TTL          time.Duration
}

// Tx is the view of the ledger inside Atomically: reads and charges under one lock.
type Tx interface {
	Prefill(pod PodKey) PrefillLoad
	// Decode returns local decode tokens + growth estimate + other live replicas' share, plus
	// decodeRequestCost per open decode charge.
	Decode(pod PodKey, rate DecodeRate) float64
	ChargePrefill(c PrefillCharge)
	ChargeDecode(c DecodeCharge)
}

// Ledger is what plugins use. Release calls are idempotent: each part is released at most
// once, unknown request IDs are no-ops, counters never go negative.
type Ledger interface {
	Atomically(fn func(tx Tx))
	// NewTokens returns the tokens a request adds to a prefill pod: the session delta when the
	// session key is known with a shorter prompt, else prompt·(100−matchPct)/100 when
	// matchPct >= 0, else the whole prompt. It records the prompt as the session's baseline.
	NewTokens(model, sessionKey string, promptTokens int, matchPct int) int
	// ReleasePrefillActive releases the active part (prefill leg done).
	ReleasePrefillActive(requestID string)
	// ReleaseAll releases every remaining part of a request (completion, failure, disconnect).
	ReleaseAll(requestID string)
}

// Defaults are the ledger owner's configured policy values (AIBRIX_TOKEN_LOAD_REQUEST_COST,
// AIBRIX_TOKEN_LOAD_KV_WEIGHT, AIBRIX_TOKEN_LOAD_TTL_SECONDS); scorers use them unless a
// per-profile override applies.
type Defaults struct {
	RequestCost float64
	KVWeight    float64
	TTL         time.Duration
}

// Provider is implemented by the plugin that owns a ledger instance (type "pd-token-ledger").
// Scorers find it by instance name through the plugin handle (see Lookup in plugin.go).
type Provider interface {
	TokenLedger() Ledger
	TokenLoadDefaults() Defaults
}

// PluginType is the type name of the plugin that owns a ledger (plugins/requestcontrol/pdtokenledger
// registers it); Lookup names it in its errors.
const PluginType = "pd-token-ledger"

// Lookup finds the ledger owner named name among the handle's plugins. Scorers call it lazily at
// first use, so the order of the plugins list does not matter.
func Lookup(h fwkplugin.HandlePlugins, name string) (Provider, error) {
	if h == nil {
		return nil, fmt.Errorf("token ledger %q: no plugin handle", name)
	}
	pl := h.Plugin(name)
	if pl == nil {
		return nil, fmt.Errorf("token ledger %q: no plugin with that name; declare a %s plugin named %q", name, PluginType, name)
	}
	prov, ok := pl.(Provider)
	if !ok {
		return nil, fmt.Errorf("token ledger %q: plugin is a %s, not a %s", name, pl.TypedName().Type, PluginType)
	}
	return prov, nil
}

// Leases is what one pod has been given and not yet finished, as a forecast reads it.
type Leases struct {
	// PrefillTokens are the open prefill active parts (request cost + new tokens): the prefill
	// work queued on the pod or being done, this replica's and the other live replicas'
	// (shared ledger).
	PrefillTokens float64
	// PrefillLegs is how many prefill legs those parts are (each carries the ledger's
	// requestCost, which a forecast counts as the step overhead instead).
	PrefillLegs int
	// DecodeSlots are the open decode charges, this replica's and the other live replicas'
	// (shared ledger): the sequences the pod batches.
	DecodeSlots int
	// DecodeTokens are those charges' prompt KV tokens.
	DecodeTokens float64
	// DecodeBudgeted of the slots carry their sequence's output budget, which sum to
	// DecodeOutputTokens: the KV those sequences grow by over their decode. Output lengths are
	// skewed and long sequences stay longest, so the sequences a pod holds have longer budgets
	// than the requests admitted lately; a forecast that takes the admitted mean for them
	// underestimates the KV they hold. Slots without a budget (no max_tokens) take the mean.
	DecodeBudgeted     int
	DecodeOutputTokens float64
}

// LeaseReader is implemented by a ledger that exposes its leases (pd-token-ledger's): an
// admission forecast reads every candidate's leases under one lock.
type LeaseReader interface {
	// Leases fills out[i] with the leases of pods[i] (zero for a pod the ledger does not know),
	// leaving out the charges of request exclude ("" = none): a request forecast again on its
	// own pick, whose charges are already in the ledger.
	Leases(pods []PodKey, out []Leases, exclude string)
}
