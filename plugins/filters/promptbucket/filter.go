// Package promptbucket is prompt-bucket-filter: AIBrix's prompt-length buckets as a GIE filter.
// It keeps the pods whose own model.aibrix.ai/config profile bucket (inclusive bounds, max 0 =
// unlimited) suits the request's prompt length; pods without a profile suit every length. No
// pod suits → no pod (never cross-bucket routing).
package promptbucket

import (
	"context"
	"encoding/json"
	"fmt"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Type is the plugin type name.
const Type = "prompt-bucket-filter"

// Filter is prompt-bucket-filter.
type Filter struct{ tn fwkplugin.TypedName }

var _ fwksched.Filter = (*Filter)(nil)

// Factory builds the filter; it takes no parameters (buckets live on the pods).
func Factory(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
	if err := pluginkit.NoParameters(Type, name, raw); err != nil {
		return nil, fmt.Errorf("%w (bucket bounds come from each pod's model.aibrix.ai/config)", err)
	}
	return &Filter{tn: fwkplugin.TypedName{Type: Type, Name: name}}, nil
}

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter implements fwksched.Filter.
func (f *Filter) Filter(_ context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	n := podmodel.PromptTokens(req)
	header := ""
	if req != nil {
		header = req.Headers[protocol.HeaderConfigProfile]
	}
	hints := podmodel.AutoHints{PromptTokens: n, MaxTokens: -1}
	out := make([]fwksched.Endpoint, 0, len(eps))
	for _, ep := range eps {
		if p := podmodel.FromEndpoint(ep); p.Suits(n, header, hints) {
			out = append(out, ep)
		}
	}
	decisiontrace.FromCycleState(cs).Note(f.tn.String(), "prompt length %d: %d of %d pods' buckets suit", n, len(out), len(eps))
	return out
}
