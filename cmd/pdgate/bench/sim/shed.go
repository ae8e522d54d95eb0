package simbench

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/gateway-api-inference-extension/apix/v1alpha2"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Shedding in a simulated run. forecast-admitter refuses only sheddable requests (an
// InferenceObjective of priority < 0), as the saturation gate does; the goodput runs send
// critical traffic, so a run that should shed names a sheddable objective on every request
// (the sheddable source) and registers it with every router.

// forecastAdmitterPlugin is a forecast-admitter config entry whose targets are the run's SLO
// and whose cost profile is the simulated engines' own, so the forecast predicts the engines
// the run measures (headroom 0 keeps the plugin's default).
func forecastAdmitterPlugin(slo SLO, headroom float64, prof *costmodel.Profile) map[string]any {
	cost := map[string]any{"chunkedPrefillTokens": prof.ChunkedPrefillTokens, "kvCapacityTokens": prof.KVCapacityTokens,
		"meanOutputTokens": prof.MeanOutputTokens, "prefill": prof.Prefill, "decode": prof.Decode, "kvTransfer": prof.KVTransfer}
	params := map[string]any{"ttft": slo.TTFT.String(), "tpot": slo.TPOT.String(), "cost": cost}
	if headroom > 0 {
		params["headroom"] = headroom
	}
	return map[string]any{"type": forecastAdmitterType, "parameters": params}
}

// withoutForecastAdmitter is a config's plugin list less every forecast-admitter it lists.
func withoutForecastAdmitter(listed []any) []any {
	plugins := make([]any, 0, len(listed)+1)
	for _, p := range listed {
		if m, ok := p.(map[string]any); ok && m["type"] == forecastAdmitterType {
			continue
		}
		plugins = append(plugins, p)
	}
	return plugins
}

// registerSheddable gives every router of s the sheddable objective (priority -1).
func registerSheddable(s *Sim) {
	low := -1
	for _, e := range s.epps {
		e.core.Datastore.ObjectiveSet(&v1alpha2.InferenceObjective{ObjectMeta: metav1.ObjectMeta{Name: sheddableObjective, Namespace: "default"},
			Spec: v1alpha2.InferenceObjectiveSpec{Priority: &low}})
	}
}

// sheddableNote is what a report says of a run's shedding.
func sheddableNote(on bool) string {
	if !on {
		return " Every request is critical: nothing is shed, an overload queues."
	}
	return " Every request is sheddable and forecast-admitter judges it against the SLO: a refused request (429) counts as missed."
}
