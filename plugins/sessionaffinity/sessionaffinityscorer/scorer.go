// Package sessionaffinityscorer is llm-d v0.11's session-affinity-scorer: it scores 1 the
// candidate a request's session points to and 0 the others, binds sessions in PreRequest and,
// under encoded_endpoint_header, writes the served endpoint into the response header. It is
// soft affinity: the other scorers decide when the session's endpoint is absent and, with
// pdgate's loadAllowance, when it is too loaded. The engine is plugins/sessionaffinity/internal/sessionaffinity,
// shared with session-affinity-filter.
package sessionaffinityscorer

import (
	"context"
	"encoding/json"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/log"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	sa "github.com/pdgate/pdgate/plugins/sessionaffinity/internal/sessionaffinity"
)

// Type is the plugin type name (llm-d's).
const Type = "session-affinity-scorer"

// ParseParameters decodes, defaults and validates the scorer's parameters.
func ParseParameters(name string, raw json.RawMessage) (sa.Config, error) {
	return sa.ParseParameters(Type, name, raw, sa.Options{LoadAllowance: true})
}

// Scorer is session-affinity-scorer.
type Scorer struct{ sa.Base }

var (
	_ fwksched.Scorer      = (*Scorer)(nil)
	_ fwkrc.PreRequest     = (*Scorer)(nil)
	_ fwkrc.ResponseHeader = (*Scorer)(nil)
)

// Factory builds the scorer (sessionaffinity.BuildBase).
func Factory(name string, raw json.RawMessage, h fwkplugin.Handle) (fwkplugin.Plugin, error) {
	b, err := sa.BuildBase(Type, name, raw, sa.Options{LoadAllowance: true}, h)
	if err != nil {
		return nil, err
	}
	return &Scorer{b}, nil
}

// New builds the scorer from a validated configuration; now is the clock (nil: time.Now).
func New(name string, c sa.Config, m *sa.Metrics, now func() time.Time) *Scorer {
	return &Scorer{sa.NewBase(Type, name, c, m, now)}
}

// Category is affinity, as llm-d's.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Affinity }

// Score gives 1 to the session's endpoint when it is a candidate (and, with loadAllowance,
// not too loaded), 0 to everyone else.
func (s *Scorer) Score(ctx context.Context, _ *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := make(map[fwksched.Endpoint]float64, len(eps))
	for _, ep := range eps {
		out[ep] = 0
	}
	target, reason := s.Affinity().Lookup(req, eps, true)
	if target != nil {
		out[target] = 1
	}
	if l := log.FromContext(ctx).V(logutil.TRACE); l.Enabled() {
		l.Info("session affinity score", "plugin", s.TypedName().String(), "endpoint", sa.ID(target), "miss", reason)
	}
	return out
}
