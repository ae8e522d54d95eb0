package testsupport

import "fmt"

// LedgerAdmission is recommended's forecast admission on a small P/D fleet, as the ledger suites
// run it: pd-token-ledger shared through Redis, aibrix-pd-pair's token_load picks,
// forecast-admitter, and the body parsed into a map so that max_tokens reaches the ledger.
// Requests carry no InferenceObjective (standalone EPP), so every one is critical and
// shedCritical lets the forecast refuse them as it refuses sheddable ones.
type LedgerAdmission struct {
	Redis string // the shared ledger's Redis address
	// ReplicaID names the EPP in the shared ledger; empty lets each replica name itself.
	ReplicaID        string
	TTFT             string // forecast-admitter's TTFT objective, a duration ("2s")
	KVCapacityTokens int    // the engines' KV cache per decode pod, for the forecast's cost model
}

// Config is the EndpointPickerConfig.
func (c LedgerAdmission) Config() string {
	replica := ""
	if c.ReplicaID != "" {
		replica = fmt.Sprintf(" replicaID: %q,", c.ReplicaID)
	}
	ledger := fmt.Sprintf(`    requestCost: 160
    kvWeight: 0.001
    redis: {address: %q,%s syncIntervalMs: 50, livenessTTLSeconds: 2, timeoutMs: 50}
`, c.Redis, replica)
	return LedgerPDConfig(ledger, fmt.Sprintf(`- type: forecast-admitter
  parameters:
    ttft: %s
    tpot: 50ms
    shedCritical: true
    cost: {kvCapacityTokens: %d}
- type: pdgate-openai-parser
  parameters:
    payload: map
`, c.TTFT, c.KVCapacityTokens))
}

// LedgerPDConfig is the EndpointPickerConfig the ledger suites build on: an AIBrix P/D fleet
// (AIBrixPDProfiles) whose aibrix-pd-pair picks by token_load from pd-token-ledger. ledger is
// the ledger's parameters (YAML lines indented four spaces, a Redis address among them when it
// is shared); extra are plugins the suite adds (YAML list items), such as admission.
func LedgerPDConfig(ledger, extra string) string {
	return `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: metrics-data-source
- type: core-metrics-extractor
- type: aibrix-engine-metrics-extractor
- type: pd-token-ledger
  parameters:
` + ledger + `- type: aibrix-pd-pair
  parameters:
    ledgerRef: pd-token-ledger
    prefillScorePolicy: token_load
    decodeScorePolicy: token_load
` + extra + `- type: aibrix-pd-prefill-filter
- type: max-score-picker
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: aibrix-pd-pair
` + AIBrixPDProfiles
}

// AIBrixPDProfiles are the scheduling profiles and the data layer of an AIBrix P/D config:
// aibrix-pd-pair picks the decode pod and pairs a prefill pod with it, which the prefill
// profile's aibrix-pd-prefill-filter returns; the engines' metrics come through AIBrix's
// extractor.
const AIBrixPDProfiles = `schedulingProfiles:
- name: decode
  plugins:
  - pluginRef: aibrix-pd-pair
  - pluginRef: max-score-picker
- name: prefill
  plugins:
  - pluginRef: aibrix-pd-prefill-filter
  - pluginRef: max-score-picker
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
    - pluginRef: aibrix-engine-metrics-extractor
`
