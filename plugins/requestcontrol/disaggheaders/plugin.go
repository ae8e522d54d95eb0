package disaggheaders

import (
	"context"
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/internal/deprecation"
	"github.com/pdgate/pdgate/plugins/lib/routingheaders"
)

// Plugin type names. Both are deprecated in llm-d in favour of disagg-profile-handler, which
// writes the same headers itself; they remain for configs that pair pd-profile-handler (or
// another profile handler) with a separate header writer.
const (
	Type       = "disagg-headers-handler"
	LegacyType = "prefill-header-handler"
)

var _ fwkrc.PreRequest = &Handler{}

// Parameters of disagg-headers-handler / prefill-header-handler.
type Parameters struct {
	PrefillProfile string `json:"prefillProfile"`
	EncodeProfile  string `json:"encodeProfile"`
}

// Handler is the deprecated PreRequest header writer.
type Handler struct {
	typedName fwkplugin.TypedName
	params    Parameters
}

// ParseParameters decodes and defaults the parameters. Unknown fields are rejected.
func ParseParameters(pluginType, name string, raw json.RawMessage) (Parameters, error) {
	p := Parameters{PrefillProfile: "prefill", EncodeProfile: "encode"}
	if err := pluginkit.Decode(pluginType, name, raw, &p); err != nil {
		return p, err
	}
	return p, nil
}

// Factory creates disagg-headers-handler.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return newHandler(Type, name, raw, handle)
}

// LegacyFactory creates prefill-header-handler (same plugin, older name).
func LegacyFactory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return newHandler(LegacyType, name, raw, handle)
}

func newHandler(pluginType, name string, raw json.RawMessage, handle fwkplugin.Handle) (*Handler, error) {
	p, err := ParseParameters(pluginType, name, raw)
	if err != nil {
		return nil, err
	}
	ctx := pluginkit.Context(handle)
	deprecation.Once(ctx, pluginType, "Deprecated: "+pluginType+" is deprecated, use disagg-profile-handler instead (it writes the disaggregation headers itself)",
		"plugin", pluginType)
	return &Handler{typedName: fwkplugin.TypedName{Type: pluginType, Name: name}, params: p}, nil
}

// TypedName implements fwkplugin.Plugin.
func (h *Handler) TypedName() fwkplugin.TypedName { return h.typedName }

// Params returns the effective parameters.
func (h *Handler) Params() Parameters { return h.params }

// PreRequest writes the routing headers from the scheduling result.
func (h *Handler) PreRequest(ctx context.Context, request *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	if request == nil {
		return
	}
	w := routingheaders.Write(request, result, h.params.PrefillProfile, h.params.EncodeProfile)
	routingheaders.LogWritten(ctx, h.typedName, request, w)
}
