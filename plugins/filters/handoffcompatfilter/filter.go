// Package handoffcompatfilter is handoff-compat-filter: in a P/D cycle the second stage's
// profile keeps only the candidates that can exchange KV with the first stage's pick (the
// decode pick in the prefill profile under decode-first, the prefill pick in the decode
// profile under prefill-first), by the handoff attributes pods declare
// (plugins/lib/handoffcompat). When none can, the request gets the configured fallback: a
// local prefill on the decode pod, or a 503.
package handoffcompatfilter

import (
	"context"
	"fmt"
	"net/http"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/internal/peer"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
)

// Type is the plugin type name.
const Type = "handoff-compat-filter"

var _ fwksched.Filter = (*Filter)(nil)

// TypedName implements fwkplugin.Plugin.
func (f *Filter) TypedName() fwkplugin.TypedName { return f.tn }

// Filter keeps the candidates compatible with the peer pick; see the package comment.
func (f *Filter) Filter(ctx context.Context, cs *fwksched.CycleState, _ *fwksched.LLMRequest, eps []fwksched.Endpoint) []fwksched.Endpoint {
	p, stage := peer.Of(cs)
	if p == nil || p.GetMetadata() == nil || !handoffcompat.Declares(p.GetMetadata().Labels) {
		return eps // first stage, or a peer that declares nothing: every candidate is compatible
	}
	want := f.specs.Of(p.GetMetadata())
	kept, dropped := f.compatible(want, eps)
	if len(kept) > 0 || len(eps) == 0 {
		return kept
	}
	reason, _ := handoffcompat.FirstMismatch(dropped, []handoffcompat.Spec{want})
	f.counter.Inc(reason, f.fallback)
	why := fmt.Sprintf("no candidate can exchange KV with the %s pick %s: they differ in %s", stage, p.GetMetadata().NamespacedName.Name, reason)
	trace := decisiontrace.FromCycleState(cs)
	if f.fallback == handoffcompat.Fail {
		contract.Record(ctx, contract.NewAnswer(http.StatusServiceUnavailable, handoffcompat.CauseNoCompatible, "routing_error", why))
		trace.Note(f.tn.String(), "%s: 503", why)
		return nil
	}
	if stage == "prefill" {
		// Prefill ran first: keep the decode candidates and drop the prefill leg, so the
		// decode pod prefills the prompt itself.
		contract.MarkSkipPrefill(cs, f.tn.String()+": "+why)
		trace.Note(f.tn.String(), "%s: prefill skipped, the decode pod prefills locally", why)
		return eps
	}
	// Decode ran first: an empty prefill profile leaves the decode pick without a prefill leg.
	trace.Note(f.tn.String(), "%s: the decode pod prefills locally", why)
	return nil
}

// compatible splits eps by compatibility with want; dropped are the specs of the others
// (for the reason). eps is returned as is when every candidate is kept.
func (f *Filter) compatible(want handoffcompat.Spec, eps []fwksched.Endpoint) (kept []fwksched.Endpoint, dropped []handoffcompat.Spec) {
	for i, ep := range eps {
		s := f.specs.Of(ep.GetMetadata())
		if handoffcompat.Compatible(want, s) {
			if kept != nil {
				kept = append(kept, ep)
			}
			continue
		}
		if kept == nil {
			kept = append(make([]fwksched.Endpoint, 0, len(eps)), eps[:i]...)
		}
		dropped = append(dropped, s)
	}
	if dropped == nil {
		return eps, nil
	}
	return kept, dropped
}
