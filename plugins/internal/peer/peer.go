// Package peer finds the endpoint the current scheduling profile should be near: llm-d's
// "peer-endpoint" request attribute, read from the stage results disagg-profile-handler
// publishes in the CycleState. Under decode-first the prefill (and encode) profiles run after
// decode and the peer is the decode pick; under prefill-first the decode profile runs after
// prefill and the peer is the prefill pick.
package peer

import (
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// Of returns the peer endpoint and the stage it was picked by ("decode" or "prefill"), or
// nil when no stage has published a pick yet (the first stage of a cycle, or a single-profile
// config).
func Of(cs *fwksched.CycleState) (fwksched.Endpoint, string) {
	if r, ok := contract.DecodeResult(cs); ok {
		if ep := r.First(); ep != nil {
			return ep, "decode"
		}
	}
	if r, ok := contract.PrefillResult(cs); ok {
		if ep := r.First(); ep != nil {
			return ep, "prefill"
		}
	}
	return nil, ""
}
