package pdknobs

import (
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// ErrUnknownDecodePolicy is returned for a profile's unknown decodeScorePolicy: AIBrix fails
// the routing rather than silently falling back.
type ErrUnknownDecodePolicy struct{ Name string }

func (e ErrUnknownDecodePolicy) Error() string {
	return fmt.Sprintf("unknown decodeScorePolicy %q in model.aibrix.ai/config (accepted: %s)",
		e.Name, strings.Join(DecodePolicies, ", "))
}

// warned makes each invalid override value warn once per process, as AIBrix does.
var warned sync.Map

func warnOnce(warn func(string), msg string) {
	if warn == nil {
		return
	}
	if _, seen := warned.LoadOrStore(msg, struct{}{}); !seen {
		warn(msg)
	}
}

// ForRequest is ForProfile for the llm-d-style AIBrix scorers: the profile the request's
// config-profile header names (or, empty or "auto", the model's default) in cfg, the model
// config of the candidates. A profile that does not resolve, or one ForProfile refuses (an
// unknown decode policy), keeps k: a scorer cannot fail the request, so it scores with the
// plugin's knobs rather than none. aibrix-pd-pair, which can fail it, calls ForProfile.
func (k Knobs) ForRequest(cfg *podmodel.ModelConfig, header string) Knobs {
	_, prof := cfg.Resolve(header, podmodel.AutoHints{MaxTokens: -1})
	if kk, err := k.ForProfile(prof, nil); err == nil {
		return kk
	}
	return k
}

// ForProfile returns the knobs for one request whose model profile resolved to prof (nil: no
// profile). Flat routingConfig fields and routingConfig.pd.<field> override the plugin's
// values; an unset or invalid pd field keeps the plugin value with a once-per-value warning;
// an unknown prefill policy keeps the plugin policy with a warning; an unknown decode policy is
// an error.
func (k Knobs) ForProfile(prof *podmodel.Profile, warn func(string)) (Knobs, error) {
	if prof == nil {
		return k, nil
	}
	rc := prof.RoutingConfig
	out := k
	if rc.PromptLengthBucketing != nil {
		out.PromptLengthBucketing = *rc.PromptLengthBucketing
	}
	if rc.BucketServe != nil {
		out.BucketServe = *rc.BucketServe
	}
	if m := strings.ToLower(rc.BucketServeMode); m != "" {
		if m == ModeThroughput || m == ModeRPS {
			out.BucketServeMode = m
		} else {
			// AIBrix maps unknown mode names to throughput.
			warnOnce(warn, fmt.Sprintf("unknown bucketServeMode %q in profile, using %s", rc.BucketServeMode, ModeThroughput))
			out.BucketServeMode = ModeThroughput
		}
	}
	if p := strings.ToLower(rc.PrefillScorePolicy); p != "" {
		if slices.Contains(PrefillPolicies, p) {
			out.PrefillScorePolicy = p
		} else {
			warnOnce(warn, fmt.Sprintf("unknown prefillScorePolicy %q in profile, keeping %s", rc.PrefillScorePolicy, k.PrefillScorePolicy))
		}
	}
	if p := strings.ToLower(rc.DecodeScorePolicy); p != "" {
		if !slices.Contains(DecodePolicies, p) {
			return k, ErrUnknownDecodePolicy{Name: rc.DecodeScorePolicy}
		}
		out.DecodeScorePolicy = p
	}
	if rc.PrefixCache != nil && rc.PrefixCache.StandardDeviationFactor > 0 {
		out.PrefixCacheStandardDeviationFactor = rc.PrefixCache.StandardDeviationFactor
	}
	for field, raw := range rc.PD {
		if err := out.applyPD(field, raw); err != nil {
			warnOnce(warn, fmt.Sprintf("ignoring routingConfig.pd.%s=%s: %v", field, string(raw), err))
		}
	}
	return out, nil
}

func (k *Knobs) applyPD(field string, raw json.RawMessage) error {
	var f float64
	if err := json.Unmarshal(raw, &f); err != nil {
		return fmt.Errorf("not a number")
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return fmt.Errorf("not finite")
	}
	isInt := f == math.Trunc(f)
	pos := func(dst *float64) error {
		if f <= 0 {
			return fmt.Errorf("must be > 0")
		}
		*dst = f
		return nil
	}
	switch field {
	case "prefillLoadImbalanceMinSpread":
		if !isInt || f <= 0 || f > math.MaxInt32 {
			return fmt.Errorf("must be an int32 > 0")
		}
		k.PrefillLoadImbalanceMinSpread = int(f)
	case "decodeLoadImbalanceMinSpread":
		return pos(&k.DecodeLoadImbalanceMinSpread)
	case "decodeThroughputImbalanceMinSpread":
		return pos(&k.DecodeThroughputImbalanceMinSpread)
	case "decodeScoreRatioThreshold":
		return pos(&k.DecodeScoreRatioThreshold)
	case "decodeLBWeightRunning":
		return pos(&k.DecodeLBWeightRunning)
	case "decodeLBWeightThroughput":
		return pos(&k.DecodeLBWeightThroughput)
	case "hybridCacheLoadFactor":
		if f < 0 || f > 1 {
			return fmt.Errorf("must be in [0,1]")
		}
		k.HybridCacheLoadFactor = f
	case "minMatchPct":
		if f < 0 || f > 100 {
			return fmt.Errorf("must be in [0,100]")
		}
		k.MinMatchPct = f
	case "tokenLoadKVWeight":
		return pos(&k.TokenLoadKVWeight)
	case "tokenLoadRequestCost":
		return pos(&k.TokenLoadRequestCost)
	case "tokenLoadTTLSeconds", "tokenLoadSessionTTLSeconds":
		if !isInt || f < 0 {
			return fmt.Errorf("must be an integer >= 0")
		}
		n := int(f)
		if field == "tokenLoadTTLSeconds" {
			k.TokenLoadTTLSeconds = &n
		} else {
			k.TokenLoadSessionTTLSeconds = &n
		}
	default:
		if protocol.IsSidecarKnob(field) {
			// Sidecar knobs: validated here so that an invalid one warns like every other
			// field; SidecarOverrides carries the valid ones to the sidecar in a header.
			_, err := sidecarSeconds(field, f)
			return err
		}
		return fmt.Errorf("unknown field")
	}
	return nil
}
