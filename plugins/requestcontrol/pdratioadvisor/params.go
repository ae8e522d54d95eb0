package pdratioadvisor

import (
	"encoding/json"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Parameters configure the advisor.
type Parameters struct {
	// Pool names the pool in the gauges' pool label (the InferencePool's name).
	Pool string `json:"pool"`
	// TTFTMs and TPOTMs are the SLO the tiers are sized for.
	TTFTMs int `json:"ttftMs"`
	TPOTMs int `json:"tpotMs"`
	// WindowSeconds is the sliding window the measurements cover.
	WindowSeconds int `json:"windowSeconds"`
	// IntervalSeconds is how often the estimate runs.
	IntervalSeconds int `json:"intervalSeconds"`
	// Band is the relative change the advice must exceed (at least one replica).
	Band float64 `json:"band"`
	// MinDwellSeconds is the shortest time between two changes of direction, and how long a
	// lower estimate must hold before a scale-down.
	MinDwellSeconds int `json:"minDwellSeconds"`
	// MaxPrefillUtilization caps the busy share a prefill pod is sized for;
	// MinPrefillUtilization is used when even an unloaded prefill misses the TTFT budget.
	MaxPrefillUtilization float64 `json:"maxPrefillUtilization"`
	MinPrefillUtilization float64 `json:"minPrefillUtilization"`
	// TPOTHeadroom is the share of the TPOT target the fitted decode step may reach (the
	// rest absorbs the spread of batches around their mean).
	TPOTHeadroom float64 `json:"tpotHeadroom"`
	// MaxBatch caps the decode batch a pod is sized for (the engine's max_num_seqs).
	MaxBatch int `json:"maxBatch"`
	// KVHeadroom is the share of a decode pod's KV cache the mean resident requests may fill
	// (the rest absorbs long prompts and the requests still arriving from prefill).
	KVHeadroom float64 `json:"kvHeadroom"`
	// MinReplicas is the smallest advice per sized role.
	MinReplicas int `json:"minReplicas"`
	// MixLookbackSeconds is how long the advisor remembers the mixes it has served: each role
	// is kept at what the present arrival rate needs if the requests turned back into the
	// heaviest of them for that role (0: no such floor).
	MixLookbackSeconds int `json:"mixLookbackSeconds"`
	// MinSamples is the number of completed requests in the window below which the advice
	// stays where it is (no_data).
	MinSamples int `json:"minSamples"`
}

// DefaultParameters are the defaults.
func DefaultParameters() Parameters {
	return Parameters{Pool: "default", TTFTMs: 1000, TPOTMs: 50, WindowSeconds: 60, IntervalSeconds: 10,
		Band: 0.1, MinDwellSeconds: 120, MaxPrefillUtilization: 0.8, MinPrefillUtilization: 0.3,
		TPOTHeadroom: 0.8, MaxBatch: 256, KVHeadroom: 0.7, MinReplicas: 1, MixLookbackSeconds: 3600, MinSamples: 20}
}

// ParseParameters decodes strictly, defaults and validates.
func ParseParameters(name string, raw json.RawMessage) (Parameters, error) {
	p := DefaultParameters()
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return Parameters{}, err
	}
	bad := func(field string, v any, want string) (Parameters, error) {
		return Parameters{}, pluginkit.Errorf(Type, name, "parameter %s=%v: %s", field, v, want)
	}
	switch {
	case p.Pool == "":
		return bad("pool", `""`, "must not be empty")
	case p.TTFTMs <= 0:
		return bad("ttftMs", p.TTFTMs, "must be > 0")
	case p.TPOTMs <= 0:
		return bad("tpotMs", p.TPOTMs, "must be > 0")
	case p.WindowSeconds <= 0:
		return bad("windowSeconds", p.WindowSeconds, "must be > 0")
	case p.IntervalSeconds <= 0:
		return bad("intervalSeconds", p.IntervalSeconds, "must be > 0")
	case p.Band < 0 || p.Band >= 1:
		return bad("band", p.Band, "must be in [0, 1)")
	case p.MinDwellSeconds < 0:
		return bad("minDwellSeconds", p.MinDwellSeconds, "must be >= 0")
	case !(p.MaxPrefillUtilization > 0 && p.MaxPrefillUtilization < 1):
		return bad("maxPrefillUtilization", p.MaxPrefillUtilization, "must be in (0, 1)")
	case !(p.MinPrefillUtilization > 0 && p.MinPrefillUtilization <= p.MaxPrefillUtilization):
		return bad("minPrefillUtilization", p.MinPrefillUtilization, "must be in (0, maxPrefillUtilization]")
	case !(p.TPOTHeadroom > 0 && p.TPOTHeadroom <= 1):
		return bad("tpotHeadroom", p.TPOTHeadroom, "must be in (0, 1]")
	case p.MaxBatch < 1:
		return bad("maxBatch", p.MaxBatch, "must be >= 1")
	case !(p.KVHeadroom > 0 && p.KVHeadroom <= 1):
		return bad("kvHeadroom", p.KVHeadroom, "must be in (0, 1]")
	case p.MinReplicas < 0:
		return bad("minReplicas", p.MinReplicas, "must be >= 0")
	case p.MixLookbackSeconds < 0:
		return bad("mixLookbackSeconds", p.MixLookbackSeconds, "must be >= 0")
	case p.MinSamples < 1:
		return bad("minSamples", p.MinSamples, "must be >= 1")
	}
	return p, nil
}

func (p Parameters) window() time.Duration   { return time.Duration(p.WindowSeconds) * time.Second }
func (p Parameters) interval() time.Duration { return time.Duration(p.IntervalSeconds) * time.Second }
func (p Parameters) dwell() time.Duration    { return time.Duration(p.MinDwellSeconds) * time.Second }
func (p Parameters) mixLookback() time.Duration {
	return time.Duration(p.MixLookbackSeconds) * time.Second
}

// stepMeetsTPOT reports whether a decode step fit leaves some batch within the TPOT budget
// (tpotHeadroom × TPOT): a rising line whose step at one sequence is within it.
func (p Parameters) stepMeetsTPOT(f StepFit) bool {
	return f.PerSeq > 0 && f.At(1) <= p.TPOTHeadroom*(time.Duration(p.TPOTMs)*time.Millisecond).Seconds()
}
