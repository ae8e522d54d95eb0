// Package rolefilter implements llm-d's role filters on the llm-d.ai/role pod label:
// decode-filter, prefill-filter and encode-filter.
package rolefilter

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Plugin type names.
const (
	DecodeType  = "decode-filter"
	PrefillType = "prefill-filter"
	EncodeType  = "encode-filter"
)

// roles lists llm-d.ai/role values (podmodel declares them; it reads the label).
func roles(rs ...podmodel.Role) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = string(r)
	}
	return out
}

// Spec is what a role filter keeps.
type Spec struct {
	Roles       []string
	AllowNoRole bool
}

// Specs of the three filters (llm-d's role sets).
var Specs = map[string]Spec{
	DecodeType:  {Roles: roles(podmodel.RoleDecode, podmodel.RolePrefillDecode, podmodel.RoleBoth, podmodel.RoleEncodePrefillDecode), AllowNoRole: true},
	PrefillType: {Roles: roles(podmodel.RolePrefill, podmodel.RoleEncodePrefill, podmodel.RolePrefillDecode, podmodel.RoleBoth, podmodel.RoleEncodePrefillDecode)},
	EncodeType:  {Roles: roles(podmodel.RoleEncode, podmodel.RoleEncodePrefill, podmodel.RoleEncodePrefillDecode)},
}

var _ fwksched.Filter = &Filter{}

// Filter keeps endpoints whose llm-d.ai/role is one of the spec's roles (and, for
// decode-filter, endpoints without the label).
type Filter struct {
	typedName fwkplugin.TypedName
	roles     map[string]bool
	allowNone bool
}

// New returns a role filter of the given type.
func New(pluginType, name string) (*Filter, error) {
	spec, ok := Specs[pluginType]
	if !ok {
		return nil, fmt.Errorf("unknown role filter type %q", pluginType)
	}
	f := &Filter{typedName: fwkplugin.TypedName{Type: pluginType, Name: name}, roles: map[string]bool{}, allowNone: spec.AllowNoRole}
	for _, r := range spec.Roles {
		f.roles[r] = true
	}
	return f, nil
}

func factory(pluginType string) fwkplugin.FactoryFunc {
	return func(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		if err := pluginkit.NoParameters(pluginType, name, raw); err != nil {
			return nil, err
		}
		return New(pluginType, name)
	}
}

// Factories of the three filters.
var (
	DecodeFactory  = factory(DecodeType)
	PrefillFactory = factory(PrefillType)
	EncodeFactory  = factory(EncodeType)
)

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.typedName }

// Keeps reports whether an endpoint with these labels passes.
func (f *Filter) Keeps(labels map[string]string) bool {
	role, has := podmodel.LLMDRole(labels)
	if !has {
		return f.allowNone
	}
	return f.roles[role]
}

// Roles returns the accepted roles, sorted.
func (f *Filter) Roles() []string {
	out := make([]string, 0, len(f.roles))
	for r := range f.roles {
		out = append(out, r)
	}
	sort.Strings(out)
	return out
}

// Filter implements fwksched.Filter.
func (f *Filter) Filter(ctx context.Context, _ *fwksched.CycleState, request *fwksched.LLMRequest, endpoints []fwksched.Endpoint) []fwksched.Endpoint {
	out := make([]fwksched.Endpoint, 0, len(endpoints))
	for _, ep := range endpoints {
		if ep == nil || ep.GetMetadata() == nil {
			continue
		}
		if f.Keeps(ep.GetMetadata().Labels) {
			out = append(out, ep)
		}
	}
	if logger := pluginkit.DebugLogger(ctx); logger.Enabled() {
		id := ""
		if request != nil {
			id = request.RequestId
		}
		logger.Info("role filter", "plugin", f.typedName.String(), "requestID", id, "in", len(endpoints), "out", len(out),
			"roles", f.Roles(), "allowNoRole", f.allowNone)
	}
	return out
}
