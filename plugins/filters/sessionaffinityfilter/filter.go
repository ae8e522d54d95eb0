// Package sessionaffinityfilter is llm-d v0.11's session-affinity-filter: when the endpoint a
// request's session points to is among the candidates, it keeps only that one; otherwise it
// returns every candidate (fail open). It is hard affinity: no load allowance. It binds
// sessions in PreRequest and writes the response header itself, so it works without the
// scorer. The engine is plugins/lib/sessionaffinity, shared with session-affinity-scorer.
package sessionaffinityfilter

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	sa "github.com/pdgate/pdgate/plugins/lib/sessionaffinity"
)

// Type is the plugin type name (llm-d's).
const Type = "session-affinity-filter"

// ParseParameters decodes, defaults and validates the filter's parameters (loadAllowance is
// the scorer's only).
func ParseParameters(name string, raw json.RawMessage) (sa.Config, error) {
	return sa.ParseParameters(Type, name, raw, sa.Options{})
}

// Filter is session-affinity-filter.
type Filter struct {
	tn fwkplugin.TypedName
	a  *sa.Affinity
}

var (
	_ fwksched.Filter      = (*Filter)(nil)
	_ fwkrc.PreRequest     = (*Filter)(nil)
	_ fwkrc.ResponseHeader = (*Filter)(nil)
)

// Factory builds the filter; the sweeper runs for the life of the handle's context (none
// without a handle: reads still honour the TTL, and the table stays bounded).
func Factory(name string, raw json.RawMessage, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
	c, err := ParseParameters(name, raw)
	if err != nil {
		return nil, err
	}
	m, err := sa.NewMetrics(pluginkit.Registerer(h))
	if err != nil {
		return nil, fmt.Errorf("%s %q: %w", Type, name, err)
	}
	f := New(name, c, m, nil)
	if h != nil && h.Context() != nil {
		f.a.Start(h.Context())
	}
	return f, nil
}

// New builds the filter from a validated configuration; now is the clock (nil: time.Now).
func New(name string, c sa.Config, m *sa.Metrics, now func() time.Time) *Filter {
	if name == "" {
		name = Type
	}
	tn := fwkplugin.TypedName{Type: Type, Name: name}
	logger := log.Log.WithName(Type).WithValues("plugin", tn.String())
	return &Filter{tn: tn, a: sa.New(tn.String(), c, m, logger, now)}
}

// Affinity returns the engine (tests, the sweeper's lifetime).
func (f *Filter) Affinity() *sa.Affinity { return f.a }

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter keeps only the session's endpoint when it is a candidate, else every candidate.
func (f *Filter) Filter(ctx context.Context, _ *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	target, reason := f.a.Lookup(req, eps, false)
	if l := log.FromContext(ctx).V(logutil.DEBUG); l.Enabled() {
		l.Info("session affinity filter", "plugin", f.tn.String(), "candidates", len(eps), "endpoint", sa.ID(target), "miss", reason)
	}
	if target == nil {
		return eps
	}
	return []fwksched.Endpoint{target}
}

// PreRequest binds the session to the pick; see sessionaffinity.Affinity.PreRequest.
func (f *Filter) PreRequest(ctx context.Context, req *fwksched.LLMRequest, result *fwksched.SchedulingResult) {
	f.a.PreRequest(ctx, req, result)
}

// ResponseHeader writes the encoded endpoint under encoded_endpoint_header.
func (f *Filter) ResponseHeader(ctx context.Context, req *fwksched.LLMRequest, resp *fwkrc.Response, target *fwkdl.EndpointMetadata) {
	f.a.ResponseHeader(ctx, req, resp, target)
}
