package aibrixpdpair

import (
	"context"
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// PrefillFilterType is the prefill-profile filter's type name.
const PrefillFilterType = "aibrix-pd-prefill-filter"

// PrefillFilter returns exactly the prefill pod aibrix-pd-pair paired with the decode pick
// (from the CycleState), or nothing when there is none (combined pick, no decision), so the
// prefill profile can never leave the roleset.
type PrefillFilter struct{ tn fwkplugin.TypedName }

var _ fwksched.Filter = (*PrefillFilter)(nil)

// PrefillFilterFactory builds the filter; it takes no parameters.
func PrefillFilterFactory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if err := pluginkit.NoParameters(PrefillFilterType, name, raw); err != nil {
		return nil, err
	}
	return &PrefillFilter{tn: fwkplugin.TypedName{Type: PrefillFilterType, Name: name}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (f *PrefillFilter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter implements fwksched.Filter.
func (f *PrefillFilter) Filter(_ context.Context, cs *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	trace := decisiontrace.FromCycleState(cs)
	st, err := fwksched.ReadCycleStateKey[*PairState](cs, StateKey)
	if err != nil || st == nil || st.Decision.Prefill == nil {
		trace.Note(f.tn.String(), "no paired prefill pod for this request")
		return nil
	}
	if ep := findEndpoint(eps, *st.Decision.Prefill); ep != nil {
		if ep == st.targets[1] {
			return st.targets[1:2:2] // the decode filter's candidates are this profile's too
		}
		return []fwksched.Endpoint{ep}
	}
	trace.Note(f.tn.String(), "paired prefill pod %s is not among the candidates", st.Decision.Prefill.Key)
	return nil
}
