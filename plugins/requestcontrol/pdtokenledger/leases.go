package pdtokenledger

import (
	"math"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Leases implements tokenload.LeaseReader: every pod's open prefill active parts and decode
// charges (with the other live replicas' shared ones), read under one lock.
func (t *Tracker) Leases(pods []tokenload.PodKey, out []tokenload.Leases) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i, k := range pods {
		var l tokenload.Leases
		if ps := t.pods[k]; ps != nil {
			l = tokenload.Leases{PrefillTokens: ps.active, PrefillLegs: ps.activeN, DecodeSlots: ps.decN, DecodeTokens: ps.decTokens}
		}
		if rem, ok := t.remote[k]; ok && t.notify != nil {
			l.DecodeSlots += int(math.Round(rem.charges))
			l.DecodeTokens += rem.tokens
		}
		out[i] = l
	}
}
