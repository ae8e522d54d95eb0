// Package stagesat is stage-aware saturation for P/D pools (llm-d's flow-control rule): a
// request needs a prefill slot and a decode slot, so the pool's saturation is the larger of
// the prefill tier's and the decode tier's, each computed by the same detector over that
// tier alone. Tiers follow the pod's role (plugins/lib/podmodel): prefill = prefill and
// encode-prefill pods; decode = decode pods and pods with no role; combined
// (prefill-decode) and encode pods belong to neither tier. When neither tier has a pod the
// whole pool is measured, so a combined-only or unlabelled pool behaves as before.
package stagesat

import (
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Stage names, the values of the stage label of saturation metrics.
const (
	StagePrefill   = "prefill"
	StageDecode    = "decode"
	StageEffective = "effective"
)

// Endpoint is what stagesat needs of an endpoint (both GIE's data-layer and scheduling
// endpoints have it).
type Endpoint interface {
	GetMetadata() *fwkdl.EndpointMetadata
}

// Tier is the stage tier a pod's role puts it in.
type Tier int

// The tiers: prefill and encode-prefill pods; decode pods and pods with no role; everything
// else (combined, encode, other AIBrix roles).
const (
	TierNeither Tier = iota
	TierPrefill
	TierDecode
)

// TierOf returns the tier of a pod with these labels.
func TierOf(labels map[string]string) Tier {
	switch podmodel.RoleOfLabels(labels) {
	case podmodel.RolePrefill, podmodel.RoleEncodePrefill:
		return TierPrefill
	case podmodel.RoleDecode, podmodel.RoleNone:
		return TierDecode
	}
	return TierNeither
}

// Split partitions eps into the prefill and decode tiers.
func Split[E Endpoint](eps []E) (prefill, decode []E) {
	for _, ep := range eps {
		md := ep.GetMetadata()
		if md == nil {
			continue
		}
		switch TierOf(md.Labels) {
		case TierPrefill:
			prefill = append(prefill, ep)
		case TierDecode:
			decode = append(decode, ep)
		}
	}
	return prefill, decode
}

// Result is one saturation evaluation.
type Result struct {
	Effective float64
	// Prefill and Decode are the tiers' values; HasPrefill/HasDecode are false for an empty
	// tier (its value is then 0 and did not count).
	Prefill, Decode       float64
	HasPrefill, HasDecode bool
	// Limiting is the stage whose value is Effective: prefill, decode, or effective (the
	// whole pool was measured).
	Limiting string
}

// Saturation evaluates measure per tier and returns the maximum; measure is a detector's
// saturation over a set of endpoints.
func Saturation[E Endpoint](eps []E, measure func([]E) float64) Result {
	p, d := Split(eps)
	var r Result
	if len(p) > 0 {
		r.Prefill, r.HasPrefill = measure(p), true
	}
	if len(d) > 0 {
		r.Decode, r.HasDecode = measure(d), true
	}
	switch {
	case !r.HasPrefill && !r.HasDecode:
		r.Effective, r.Limiting = measure(eps), StageEffective
	case r.HasPrefill && (!r.HasDecode || r.Prefill >= r.Decode):
		r.Effective, r.Limiting = r.Prefill, StagePrefill
	default:
		r.Effective, r.Limiting = r.Decode, StageDecode
	}
	return r
}
