package sessionaffinity

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
)

// Base is what session-affinity-scorer and session-affinity-filter share: the plugin's typed
// name, its affinity engine, and the two hooks both expose (PreRequest binds the session,
// ResponseHeader writes the encoded endpoint). Each plugin embeds it and adds its own
// extension point (Score or Filter).
type Base struct {
	tn fwkplugin.TypedName
	a  *Affinity
}

// NewBase builds the shell of a plugin of pluginType from a validated configuration; now is the
// clock (nil: time.Now).
func NewBase(pluginType, name string, c Config, m *Metrics, now func() time.Time) Base {
	tn := pluginkit.TypedName(pluginType, name)
	logger := log.Log.WithName(pluginType).WithValues("plugin", tn.String())
	return Base{tn: tn, a: New(tn.String(), c, m, logger, now)}
}

// BuildBase is the factory body both plugins share: parse and validate the parameters, register
// the metrics, build the shell, and run the sweeper for the life of the handle's context (none
// without a handle: reads still honour the TTL, and the table stays bounded).
func BuildBase(pluginType, name string, raw json.RawMessage, opt Options, h fwkplugin.Handle) (Base, error) {
	c, err := ParseParameters(pluginType, name, raw, opt)
	if err != nil {
		return Base{}, err
	}
	m, err := NewMetrics(pluginkit.Registerer(h))
	if err != nil {
		return Base{}, fmt.Errorf("%s %q: %w", pluginType, name, err)
	}
	b := NewBase(pluginType, name, c, m, nil)
	if h != nil && h.Context() != nil {
		b.a.Start(h.Context())
	}
	return b, nil
}

// TypedName implements fwkplugin.Plugin.
func (b *Base) TypedName() fwkplugin.TypedName { return b.tn }

// Affinity returns the engine (tests, the sweeper's lifetime).
func (b *Base) Affinity() *Affinity { return b.a }

// PreRequest binds the session to the pick; see Affinity.PreRequest.
func (b *Base) PreRequest(ctx context.Context, req *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	b.a.PreRequest(ctx, req, result)
}

// ResponseHeader writes the encoded endpoint under encoded_endpoint_header.
func (b *Base) ResponseHeader(ctx context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, target *fwkdl.EndpointMetadata) {
	b.a.ResponseHeader(ctx, req, resp, target)
}
