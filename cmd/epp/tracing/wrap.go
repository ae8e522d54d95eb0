package tracing

import (
	"context"
	"fmt"

	configapi "sigs.k8s.io/gateway-api-inference-extension/apix/config/v1alpha1"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
)

// activeKey marks, in the CycleState, that this cycle is traced; its value is the Trace. The
// wrappers look for it rather than for decisiontrace.StateKey because plugins may create a
// trace unconditionally, and untraced cycles must not pay for recording.
const activeKey fwkplugin.StateKey = "pdgate-decision-trace-active"

// Recorder traces the requests the request path asks it to (cmd/epp/extproc.TraceSource). A
// trace lives on the request's context, so nothing is kept per request ID.
type Recorder struct{}

type slotKey struct{}

// slot is one request's trace: wanted is decided by the request path (the client asked and
// may, or the log level records every trace); t is filled when the first profile runs.
type slot struct {
	wanted bool
	t      *decisiontrace.Trace
}

// Begin implements extproc.TraceSource.
func (Recorder) Begin(ctx context.Context, wanted bool) (context.Context, func() *decisiontrace.Trace) {
	s := &slot{wanted: wanted}
	return context.WithValue(ctx, slotKey{}, s), func() *decisiontrace.Trace { return s.t }
}

func active(cs *fwksched.CycleState) *decisiontrace.Trace {
	if cs == nil {
		return nil
	}
	v, err := cs.Read(activeKey)
	if err != nil {
		return nil
	}
	t, _ := v.(*decisiontrace.Trace)
	return t
}

// WrapSchedulerConfig rebuilds the scheduler configuration of a loaded config (raw must be the
// config InstantiateAndConfigure completed: it fills in defaults in place) with every filter,
// scorer and picker of every profile, and the profile handler, wrapped in recorders. The
// original plugin objects stay in the handle for their request-control roles.
func WrapSchedulerConfig(raw *configapi.EndpointPickerConfig, handle fwkplugin.Handle) (*scheduling.SchedulerConfig, error) {
	profiles := make(map[string]fwksched.SchedulerProfile, len(raw.SchedulingProfiles))
	for _, p := range raw.SchedulingProfiles {
		var (
			filters []fwksched.Filter
			scorers []*scheduling.WeightedScorer
			picker  fwksched.Picker
		)
		for _, ref := range p.Plugins {
			pl := handle.Plugin(ref.PluginRef)
			if pl == nil {
				return nil, fmt.Errorf("profile %q references plugin %q that is not loaded", p.Name, ref.PluginRef)
			}
			if f, ok := pl.(fwksched.Filter); ok {
				filters = append(filters, &filter{inner: f, profile: p.Name})
			}
			if s, ok := pl.(fwksched.Scorer); ok {
				w := 1.0
				if ref.Weight != nil {
					w = *ref.Weight
				}
				scorers = append(scorers, scheduling.NewWeightedScorer(&scorer{inner: s, profile: p.Name}, w))
			}
			if pk, ok := pl.(fwksched.Picker); ok {
				if picker != nil {
					return nil, fmt.Errorf("profile %q has more than one picker (%s, %s)", p.Name, picker.TypedName(), pk.TypedName())
				}
				picker = &pickerW{inner: pk, profile: p.Name}
			}
		}
		prof := scheduling.NewSchedulerProfile().WithFilters(filters...).WithScorers(scorers...)
		if picker != nil {
			prof = prof.WithPicker(picker)
		}
		profiles[p.Name] = prof
	}
	var handler fwksched.ProfileHandler
	for _, pl := range handle.GetAllPlugins() {
		if ph, ok := pl.(fwksched.ProfileHandler); ok {
			if handler != nil {
				return nil, fmt.Errorf("multiple profile handlers (%s, %s)", handler.TypedName(), ph.TypedName())
			}
			handler = ph
		}
	}
	if handler == nil {
		return nil, fmt.Errorf("no profile handler configured")
	}
	return scheduling.NewSchedulerConfig(&profileHandler{inner: handler}, profiles), nil
}

type filter struct {
	inner   fwksched.Filter
	profile string
}

func (f *filter) TypedName() fwkplugin.TypedName { return f.inner.TypedName() }

func (f *filter) Filter(ctx context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	out := f.inner.Filter(ctx, cs, req, eps)
	if t := active(cs); t != nil {
		t.Filter(f.profile, f.TypedName().String(), len(eps), len(out))
	}
	return out
}

type scorer struct {
	inner   fwksched.Scorer
	profile string
}

func (s *scorer) TypedName() fwkplugin.TypedName    { return s.inner.TypedName() }
func (s *scorer) Category() fwksched.ScorerCategory { return s.inner.Category() }

func (s *scorer) Score(ctx context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest, eps []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	out := s.inner.Score(ctx, cs, req, eps)
	if t := active(cs); t != nil {
		t.Score(s.profile, s.TypedName().String(), out)
	}
	return out
}

type pickerW struct {
	inner   fwksched.Picker
	profile string
}

func (p *pickerW) TypedName() fwkplugin.TypedName { return p.inner.TypedName() }

func (p *pickerW) Pick(ctx context.Context, cs *fwksched.CycleState, scored []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	res := p.inner.Pick(ctx, cs, scored)
	if t := active(cs); t != nil && (res == nil || len(res.TargetEndpoints) == 0) {
		t.Note(p.TypedName().String(), "profile %s: picker chose nothing among %d endpoints", p.profile, len(scored))
	}
	return res
}

type profileHandler struct {
	inner fwksched.ProfileHandler
}

func (h *profileHandler) TypedName() fwkplugin.TypedName { return h.inner.TypedName() }

func (h *profileHandler) Pick(ctx context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest,
	profiles map[string]fwksched.SchedulerProfile, results map[string]*fwksched.ProfileRunResult) map[string]fwksched.SchedulerProfile {
	// The first Pick of a cycle decides whether the cycle is traced; the trace is registered
	// right away so a failed cycle can be explained too.
	if len(results) == 0 && cs != nil && active(cs) == nil {
		if s, _ := ctx.Value(slotKey{}).(*slot); s != nil && s.wanted {
			s.t = decisiontrace.Start(cs)
			cs.Write(activeKey, s.t)
		}
	}
	return h.inner.Pick(ctx, cs, req, profiles, results)
}

func (h *profileHandler) ProcessResults(ctx context.Context, cs *fwksched.CycleState, req *fwksched.LLMRequest,
	results map[string]*fwksched.ProfileRunResult) (*fwksched.SchedulingResult, error) {
	res, err := h.inner.ProcessResults(ctx, cs, req, results)
	t := active(cs)
	if t == nil {
		return res, err
	}
	if err != nil {
		t.Note(h.TypedName().String(), "scheduling failed: %v", err)
		return res, err
	}
	if res != nil {
		for name, r := range res.ProfileResults {
			if r != nil {
				t.Picked(name, r.TargetEndpoints)
			}
		}
	}
	return res, err
}
