// Package aibrixrolesetfilter is aibrix-roleset-filter: AIBrix's roleset rules as a GIE filter for
// llm-d-style compositions (role filters + scorers + disagg-profile-handler). It drops
// multi-node followers and every pod of an incomplete roleset and, in the prefill (or encode)
// profile, keeps only the roleset of the decode pick, so a prefill never pairs across
// rolesets. Pods without roleset-name keep llm-d semantics and pass through.
package aibrixrolesetfilter

import (
	"context"
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Type is the plugin type name.
const Type = "aibrix-roleset-filter"

// Params are the filter's parameters.
type Params struct {
	// SameRolesetAsDecode keeps only the decode pick's roleset when the decode stage already
	// ran (contract.DecodeResultKey); use it in prefill/encode profiles.
	SameRolesetAsDecode bool `json:"sameRolesetAsDecode"`
}

// Filter is aibrix-roleset-filter.
type Filter struct {
	tn fwkplugin.TypedName
	p  Params
}

var _ fwksched.Filter = (*Filter)(nil)

// Factory builds the filter.
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	var p Params
	if err := pluginkit.Decode(Type, name, raw, &p); err != nil {
		return nil, err
	}
	return &Filter{tn: fwkplugin.TypedName{Type: Type, Name: name}, p: p}, nil
}

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter implements fwksched.Filter.
func (f *Filter) Filter(_ context.Context, cs *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	pods := make([]podmodel.Pod, len(eps))
	for i, ep := range eps {
		pods[i] = podmodel.FromEndpoint(ep)
	}
	complete := map[string]bool{}
	for _, rs := range podmodel.EligibleRolesets(pods) {
		complete[rs.Name] = true
	}
	want := ""
	if f.p.SameRolesetAsDecode {
		if res, ok := contract.DecodeResult(cs); ok && res.First() != nil {
			want = podmodel.FromEndpoint(res.First()).Roleset
		}
	}
	out := make([]fwksched.Endpoint, 0, len(eps))
	dropped := 0
	for i, p := range pods {
		switch {
		case !p.Routable:
		case p.Roleset != "" && p.InRoleset() && !complete[p.Roleset]:
		case want != "" && p.Roleset != want:
		default:
			out = append(out, eps[i])
			continue
		}
		dropped++
	}
	if dropped > 0 {
		decisiontrace.FromCycleState(cs).Note(f.tn.String(), "dropped %d of %d (followers, incomplete rolesets%s)", dropped, len(eps),
			map[bool]string{true: ", other rolesets than the decode pick's " + want, false: ""}[want != ""])
	}
	return out
}
