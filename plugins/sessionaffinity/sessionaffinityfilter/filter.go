// Package sessionaffinityfilter is llm-d v0.11's session-affinity-filter: when the endpoint a
// request's session points to is among the candidates, it keeps only that one; otherwise it
// returns every candidate (fail open). It is hard affinity: no load allowance. It binds
// sessions in PreRequest and writes the response header itself, so it works without the
// scorer. The engine is plugins/sessionaffinity/internal/sessionaffinity, shared with session-affinity-scorer.
package sessionaffinityfilter

import (
	"context"
	"encoding/json"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	sa "github.com/pdgate/pdgate/plugins/sessionaffinity/internal/sessionaffinity"
)

// Type is the plugin type name (llm-d's).
const Type = "session-affinity-filter"

// ParseParameters decodes, defaults and validates the filter's parameters (loadAllowance is
// the scorer's only).
func ParseParameters(name string, raw json.RawMessage) (sa.Config, error) {
	return sa.ParseParameters(Type, name, raw, sa.Options{})
}

// Filter is session-affinity-filter.
type Filter struct{ sa.Base }

var (
	_ fwksched.Filter      = (*Filter)(nil)
	_ fwkrc.PreRequest     = (*Filter)(nil)
	_ fwkrc.ResponseHeader = (*Filter)(nil)
)

// Factory builds the filter (sessionaffinity.BuildBase).
func Factory(name string, raw json.RawMessage, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
	b, err := sa.BuildBase(Type, name, raw, sa.Options{}, h)
	if err != nil {
		return nil, err
	}
	return &Filter{b}, nil
}

// New builds the filter from a validated configuration; now is the clock (nil: time.Now).
func New(name string, c sa.Config, m *sa.Metrics, now func() time.Time) *Filter {
	return &Filter{sa.NewBase(Type, name, c, m, now)}
}

// Filter keeps only the session's endpoint when it is a candidate, else every candidate.
func (f *Filter) Filter(ctx context.Context, _ *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	target, reason := f.Affinity().Lookup(req, eps, false)
	if l := pluginkit.DebugLogger(ctx); l.Enabled() {
		l.Info("session affinity filter", "plugin", f.TypedName().String(), "candidates", len(eps), "endpoint", sa.ID(target), "miss", reason)
	}
	if target == nil {
		return eps
	}
	return []fwksched.Endpoint{target}
}
