package disaggprofile

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/go-logr/logr"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// StageOrder says which of prefill and decode is picked first.
type StageOrder string

// Stage orders. decode-first is llm-d's historical behaviour; prefill-first (llm-d PR #2342)
// runs the prefill profile before decode so decode plugins can follow the prefill pick.
const (
	DecodeFirst  StageOrder = "decode-first"
	PrefillFirst StageOrder = "prefill-first"
)

// ParseStageOrder normalises the accepted spellings (decode-first, decodeFirst, decode_first,
// DECODE-FIRST, empty → decode-first).
func ParseStageOrder(s string) (StageOrder, error) {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "", " ", "").Replace(strings.TrimSpace(s)))
	switch n {
	case "", "decodefirst":
		return DecodeFirst, nil
	case "prefillfirst":
		return PrefillFirst, nil
	}
	return "", fmt.Errorf("invalid stageOrder %q: must be one of %s, %s", s, DecodeFirst, PrefillFirst)
}

// Profiles names the scheduling profiles of the three stages.
type Profiles struct {
	Decode  string `json:"decode,omitempty"`
	Prefill string `json:"prefill,omitempty"`
	Encode  string `json:"encode,omitempty"`
}

// Deciders names the decider plugin instances of the optional stages.
type Deciders struct {
	Prefill string `json:"prefill,omitempty"`
	Encode  string `json:"encode,omitempty"`
}

// rawParameters is the wire form: the nested format, llm-d's deprecated flat format, and the
// pd-profile-handler keys that older configs carry over (accepted and ignored).
type rawParameters struct {
	Profiles                   *Profiles `json:"profiles,omitempty"`
	Deciders                   *Deciders `json:"deciders,omitempty"`
	StageOrder                 string    `json:"stageOrder,omitempty"`
	CombinedDecodeSkipsPrefill *bool     `json:"combinedDecodeSkipsPrefill,omitempty"`

	DecodeProfile            string `json:"decodeProfile,omitempty"`
	PrefillProfile           string `json:"prefillProfile,omitempty"`
	EncodeProfile            string `json:"encodeProfile,omitempty"`
	DeciderPluginName        string `json:"deciderPluginName,omitempty"`
	PrefillDeciderPluginName string `json:"prefillDeciderPluginName,omitempty"`
	EncodeDeciderPluginName  string `json:"encodeDeciderPluginName,omitempty"`

	PrefixPluginType string          `json:"prefixPluginType,omitempty"`
	PrefixPluginName string          `json:"prefixPluginName,omitempty"`
	PrimaryPort      json.RawMessage `json:"primaryPort,omitempty"`
}

// Parameters are the validated, defaulted parameters of disagg-profile-handler.
type Parameters struct {
	Profiles   Profiles
	Deciders   Deciders
	StageOrder StageOrder
	// CombinedDecodeSkipsPrefill: when the decode pick's llm-d.ai/role is a combined role
	// (prefill-decode, both, encode-prefill-decode), do not run a remote prefill. Default true.
	CombinedDecodeSkipsPrefill bool
}

const mixError = "cannot mix deprecated flat parameters (decodeProfile, prefillProfile, encodeProfile, deciderPluginName, prefillDeciderPluginName, encodeDeciderPluginName) with nested parameters (profiles, deciders): use one format or the other"

// ParseParameters decodes, validates and defaults the parameters, logging each deprecated
// spelling it meets.
func ParseParameters(name string, raw json.RawMessage, logger logr.Logger) (Parameters, error) {
	p := Parameters{
		Profiles:                   Profiles{Decode: "decode", Prefill: "prefill", Encode: "encode"},
		StageOrder:                 DecodeFirst,
		CombinedDecodeSkipsPrefill: true,
	}
	var r rawParameters
	if err := pluginkit.Decode(HandlerType, name, raw, &r); err != nil {
		return p, err
	}
	nested := r.Profiles != nil || r.Deciders != nil
	flat := r.DecodeProfile != "" || r.PrefillProfile != "" || r.EncodeProfile != "" ||
		r.DeciderPluginName != "" || r.PrefillDeciderPluginName != "" || r.EncodeDeciderPluginName != ""
	if nested && flat && nestedNonEmpty(r) {
		return p, fmt.Errorf("%s", mixError)
	}
	if flat {
		logger.Info("Deprecated: using flat parameter format, migrate to nested profiles/deciders format", "plugin", HandlerType)
		deprecated := func(old, repl, v string, dst *string) {
			if v != "" {
				logger.Info(fmt.Sprintf("Deprecated parameter '%s', use '%s' instead", old, repl), "plugin", HandlerType)
				*dst = v
			}
		}
		deprecated("decodeProfile", "profiles.decode", r.DecodeProfile, &p.Profiles.Decode)
		deprecated("prefillProfile", "profiles.prefill", r.PrefillProfile, &p.Profiles.Prefill)
		deprecated("encodeProfile", "profiles.encode", r.EncodeProfile, &p.Profiles.Encode)
		deprecated("deciderPluginName", "deciders.prefill", r.DeciderPluginName, &p.Deciders.Prefill)
		// prefillDeciderPluginName outranks deciderPluginName, as in llm-d.
		deprecated("prefillDeciderPluginName", "deciders.prefill", r.PrefillDeciderPluginName, &p.Deciders.Prefill)
		deprecated("encodeDeciderPluginName", "deciders.encode", r.EncodeDeciderPluginName, &p.Deciders.Encode)
	}
	if r.Profiles != nil {
		setIf(&p.Profiles.Decode, r.Profiles.Decode)
		setIf(&p.Profiles.Prefill, r.Profiles.Prefill)
		setIf(&p.Profiles.Encode, r.Profiles.Encode)
	}
	if r.Deciders != nil {
		setIf(&p.Deciders.Prefill, r.Deciders.Prefill)
		setIf(&p.Deciders.Encode, r.Deciders.Encode)
	}
	if r.PrefixPluginType != "" || r.PrefixPluginName != "" || len(r.PrimaryPort) > 0 {
		logger.Info("Ignoring pd-profile-handler parameters (prefixPluginType, prefixPluginName, primaryPort): disagg-profile-handler does not use them", "plugin", HandlerType)
	}
	order, err := ParseStageOrder(r.StageOrder)
	if err != nil {
		return p, err
	}
	p.StageOrder = order
	if r.CombinedDecodeSkipsPrefill != nil {
		p.CombinedDecodeSkipsPrefill = *r.CombinedDecodeSkipsPrefill
	}
	logDisabledStages(logger, p.Deciders)
	return p, nil
}

// nestedNonEmpty reports whether the nested objects carry a value (an empty "profiles: {}"
// next to flat keys is not a conflict).
func nestedNonEmpty(r rawParameters) bool {
	return (r.Profiles != nil && *r.Profiles != Profiles{}) || (r.Deciders != nil && *r.Deciders != Deciders{})
}

func setIf(dst *string, v string) {
	if v != "" {
		*dst = v
	}
}

func logDisabledStages(logger logr.Logger, d Deciders) {
	if d.Prefill == "" {
		logger.V(1).Info("No deciders.prefill configured, P/D disaggregation disabled", "plugin", HandlerType)
	}
	if d.Encode == "" {
		logger.V(1).Info("No deciders.encode configured, E disaggregation disabled", "plugin", HandlerType)
	}
}

func loggerFrom(ctx context.Context) logr.Logger { return log.FromContext(ctx) }
