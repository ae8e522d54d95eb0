// Package knobscorer is what aibrix-decode-scorer and aibrix-prefill-scorer share: an instance
// built from the AIBrix knobs (refusing a policy whose charge must be atomic with the pick) and
// the knobs it scores one request with.
package knobscorer

import (
	"encoding/json"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Base is an AIBrix scorer instance: its name and the knobs it was loaded with. The scorers
// embed it.
type Base struct {
	tn    fwkplugin.TypedName
	knobs pdknobs.Knobs
}

// Load builds instance name of pluginType from its knobs (pdknobs.LoadForPlugin). refuse
// returns the policy the knobs name that the scorer cannot run, "" when there is none: a
// ledger-charging policy belongs to aibrix-pd-pair, which charges with the pick.
func Load(handle fwkplugin.Handle, pluginType, name string, raw json.RawMessage, refuse func(pdknobs.Knobs) string) (Base, error) {
	k, err := pdknobs.LoadForPlugin(pluginkit.Context(handle), pluginType, name, raw)
	if err != nil {
		return Base{}, err
	}
	if policy := refuse(k); policy != "" {
		return Base{}, pluginkit.Errorf(pluginType, name, "%s charges the ledger with the pick; use aibrix-pd-pair", policy)
	}
	return Base{tn: fwkplugin.TypedName{Type: pluginType, Name: name}, knobs: k}, nil
}

// TypedName implements fwkplugin.Plugin.
func (b *Base) TypedName() fwkplugin.TypedName { return b.tn }

// KnobsFor are the knobs req is scored with: the profile of cfg (the candidates' model config)
// that req's config-profile header names, over the instance's knobs (pdknobs.Knobs.ForRequest);
// no request: the instance's knobs.
func (b *Base) KnobsFor(req *fwksched.LLMRequest, cfg *podmodel.ModelConfig) pdknobs.Knobs {
	if req == nil {
		return b.knobs
	}
	return b.knobs.ForRequest(cfg, req.Headers[protocol.HeaderConfigProfile])
}
