package contract

import (
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

// CycleState keys through which disagg-profile-handler composes with other plugins (for
// example AIBrix-style roleset filters, pair pickers and combined-pod overflow).
const (
	// DecodeResultKey holds a *StageResult with the decode profile's pick. It is written as
	// soon as the decode profile has run, before the encode and prefill profiles run, so that
	// their filters/scorers/pickers can follow the decode pick (e.g. keep prefill in the decode
	// pod's roleset).
	DecodeResultKey fwkplugin.StateKey = "pdgate.io/disagg/decode-result"
	// PrefillResultKey holds a *StageResult with the prefill pick when stageOrder is
	// prefill-first, written before the decode profile runs (e.g. for rack affinity).
	PrefillResultKey fwkplugin.StateKey = "pdgate.io/disagg/prefill-result"
	// SkipPrefillKey: any plugin that runs in the decode profile may write a *Skip here (use
	// MarkSkipPrefill) to tell the handler not to run the prefill stage for this request, e.g.
	// because the decode pick is a combined pod that prefills locally. The reason is recorded in
	// the decision trace.
	SkipPrefillKey fwkplugin.StateKey = "pdgate.io/disagg/skip-prefill"
	// SkipEncodeKey is the same marker for the encode stage.
	SkipEncodeKey fwkplugin.StateKey = "pdgate.io/disagg/skip-encode"
)

// StageResult is a stage's pick, published in the CycleState.
type StageResult struct {
	Profile   string
	Endpoints []fwksched.Endpoint
}

// Clone implements fwkplugin.StateData. Endpoints are shared: they are the request's snapshot.
func (s *StageResult) Clone() fwkplugin.StateData {
	if s == nil {
		return nil
	}
	return &StageResult{Profile: s.Profile, Endpoints: append([]fwksched.Endpoint(nil), s.Endpoints...)}
}

// First returns the first endpoint, or nil.
func (s *StageResult) First() fwksched.Endpoint {
	if s == nil || len(s.Endpoints) == 0 {
		return nil
	}
	return s.Endpoints[0]
}

// Skip is a "do not run this stage" marker.
type Skip struct{ Reason string }

// Clone implements fwkplugin.StateData.
func (s *Skip) Clone() fwkplugin.StateData { c := *s; return &c }

// MarkSkipPrefill asks disagg-profile-handler not to run the prefill stage for this cycle.
func MarkSkipPrefill(cs *fwksched.CycleState, reason string) {
	if cs != nil {
		cs.Write(SkipPrefillKey, &Skip{Reason: reason})
	}
}

// MarkSkipEncode asks disagg-profile-handler not to run the encode stage for this cycle.
func MarkSkipEncode(cs *fwksched.CycleState, reason string) {
	if cs != nil {
		cs.Write(SkipEncodeKey, &Skip{Reason: reason})
	}
}

// DecodeResult returns the decode pick published by the handler, if the decode stage has run.
func DecodeResult(cs *fwksched.CycleState) (*StageResult, bool) {
	return readStage(cs, DecodeResultKey)
}

// PrefillResult returns the prefill pick published in prefill-first mode.
func PrefillResult(cs *fwksched.CycleState) (*StageResult, bool) {
	return readStage(cs, PrefillResultKey)
}

func readStage(cs *fwksched.CycleState, key fwkplugin.StateKey) (*StageResult, bool) {
	if cs == nil {
		return nil, false
	}
	v, err := fwksched.ReadCycleStateKey[*StageResult](cs, key)
	if err != nil || v == nil {
		return nil, false
	}
	return v, true
}

func ReadSkip(cs *fwksched.CycleState, key fwkplugin.StateKey) (string, bool) {
	if cs == nil {
		return "", false
	}
	v, err := fwksched.ReadCycleStateKey[*Skip](cs, key)
	if err != nil || v == nil {
		return "", false
	}
	return v.Reason, true
}
