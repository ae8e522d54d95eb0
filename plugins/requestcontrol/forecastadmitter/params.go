package forecastadmitter

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Parameters are forecast-admitter's parameters.
type Parameters struct {
	// LedgerRef names the pd-token-ledger whose leases the forecast reads.
	LedgerRef string `json:"ledgerRef"`
	// TTFT and TPOT are the objective of a request that names none in its SLO headers.
	TTFT string `json:"ttft"`
	TPOT string `json:"tpot"`
	// ShedCritical refuses critical requests (priority >= 0) too; by default only sheddable
	// ones (priority < 0) are refused, as GIE's gate and llm-d's flow control do.
	ShedCritical bool `json:"shedCritical"`
	// Headroom is the share of each target a forecast may take (the forecast is a mean; the
	// rest absorbs what it does not see).
	Headroom float64 `json:"headroom"`
	// Cost is the engine cost profile, in config/sim's cost-profile units.
	Cost Cost `json:"cost"`

	ttft, tpot time.Duration
}

// Cost is an engine's cost profile: the fields and units of config/sim/*.yaml (the simulator's
// profile), so a measured or published profile is pasted as it is.
type Cost struct {
	ChunkedPrefillTokens int         `json:"chunkedPrefillTokens"`
	KVCapacityTokens     int         `json:"kvCapacityTokens"`
	MeanOutputTokens     int         `json:"meanOutputTokens"`
	Prefill              PrefillCost `json:"prefill"`
	Decode               DecodeCost  `json:"decode"`
	KVTransfer           KVTransfer  `json:"kvTransfer"`
}

// PrefillCost is one prefill step: overheadMs + linearMsPerToken·n + quadraticMsPerToken2·n².
type PrefillCost struct {
	OverheadMs           float64 `json:"overheadMs"`
	LinearMsPerToken     float64 `json:"linearMsPerToken"`
	QuadraticMsPerToken2 float64 `json:"quadraticMsPerToken2"`
}

// DecodeCost is one decode step: baseMs + perSeqMs·batch + perKVTokenMs·resident KV tokens.
type DecodeCost struct {
	BaseMs       float64 `json:"baseMs"`
	PerSeqMs     float64 `json:"perSeqMs"`
	PerKVTokenMs float64 `json:"perKVTokenMs"`
}

// KVTransfer is the prefill → decode KV handoff: latencyMs + tokens·bytesPerToken / bandwidth.
type KVTransfer struct {
	LatencyMs     float64 `json:"latencyMs"`
	BytesPerToken float64 `json:"bytesPerToken"`
	BandwidthGBps float64 `json:"bandwidthGBps"`
}

// DefaultCost is config/sim/llama3-8b-h100.yaml (Llama-3.1-8B, one H100, TP=1).
func DefaultCost() Cost {
	return Cost{ChunkedPrefillTokens: 2048, KVCapacityTokens: 400000, MeanOutputTokens: 128,
		Prefill:    PrefillCost{OverheadMs: 5, LinearMsPerToken: 0.032, QuadraticMsPerToken2: 6.5e-7},
		Decode:     DecodeCost{BaseMs: 6.8, PerSeqMs: 0.05, PerKVTokenMs: 0.000056},
		KVTransfer: KVTransfer{LatencyMs: 2, BytesPerToken: 131072, BandwidthGBps: 50}}
}

// DefaultParameters: a 1 s TTFT and 50 ms TPOT (pd-ratio-advisor's and recommended's
// prefillBackedUp targets), the H100 profile.
func DefaultParameters() Parameters {
	return Parameters{LedgerRef: tokenload.PluginType, TTFT: "1s", TPOT: "50ms", Headroom: 0.8, Cost: DefaultCost()}
}

// ParseParameters decodes strictly, defaults and validates.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	return p, nil
}

// Validate implements pluginkit.Validator.
func (p *Parameters) Validate() error {
	var err error
	if p.LedgerRef == "" {
		return errors.New("parameter ledgerRef: must name a pd-token-ledger plugin")
	}
	if p.ttft, err = positiveDuration("ttft", p.TTFT); err != nil {
		return err
	}
	if p.tpot, err = positiveDuration("tpot", p.TPOT); err != nil {
		return err
	}
	if !(p.Headroom > 0 && p.Headroom <= 1) {
		return fmt.Errorf("parameter headroom=%v: must be in (0, 1]", p.Headroom)
	}
	return p.Cost.validate()
}

func positiveDuration(field, v string) (time.Duration, error) {
	d, err := time.ParseDuration(v)
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("parameter %s=%q: must be a positive duration such as \"1s\"", field, v)
	}
	return d, nil
}

func (c Cost) validate() error {
	for _, f := range []struct {
		name     string
		v        float64
		positive bool
	}{
		{"cost.chunkedPrefillTokens", float64(c.ChunkedPrefillTokens), false},
		{"cost.kvCapacityTokens", float64(c.KVCapacityTokens), false},
		{"cost.meanOutputTokens", float64(c.MeanOutputTokens), true},
		{"cost.prefill.overheadMs", c.Prefill.OverheadMs, false},
		{"cost.prefill.linearMsPerToken", c.Prefill.LinearMsPerToken, true},
		{"cost.prefill.quadraticMsPerToken2", c.Prefill.QuadraticMsPerToken2, false},
		{"cost.decode.baseMs", c.Decode.BaseMs, true},
		{"cost.decode.perSeqMs", c.Decode.PerSeqMs, false},
		{"cost.decode.perKVTokenMs", c.Decode.PerKVTokenMs, false},
		{"cost.kvTransfer.latencyMs", c.KVTransfer.LatencyMs, false},
		{"cost.kvTransfer.bytesPerToken", c.KVTransfer.BytesPerToken, false},
		{"cost.kvTransfer.bandwidthGBps", c.KVTransfer.BandwidthGBps, false},
	} {
		switch {
		case math.IsNaN(f.v) || math.IsInf(f.v, 0) || f.v < 0:
			return fmt.Errorf("parameter %s=%v: must be a finite number >= 0", f.name, f.v)
		case f.positive && f.v == 0:
			return fmt.Errorf("parameter %s=%v: must be > 0", f.name, f.v)
		}
	}
	if c.KVTransfer.BytesPerToken > 0 && c.KVTransfer.BandwidthGBps == 0 {
		return errors.New("parameter cost.kvTransfer.bandwidthGBps: must be > 0 when bytesPerToken is set")
	}
	return nil
}
