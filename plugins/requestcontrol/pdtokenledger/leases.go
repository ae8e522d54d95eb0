package pdtokenledger

import (
	"math"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Leases implements tokenload.LeaseReader: every pod's open prefill active parts and decode
// charges (with the other live replicas' shared ones, prefill included: only the forecast adds
// those, the prefill scores stay local), read under one lock, less the charges of request
// exclude.
func (t *Tracker) Leases(pods []tokenload.PodKey, out []tokenload.Leases, exclude string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var own *reqEntry
	if exclude != "" {
		own = t.reqs[exclude]
	}
	for i, k := range pods {
		var l tokenload.Leases
		if ps := t.pods[k]; ps != nil {
			l = tokenload.Leases{PrefillTokens: ps.active, PrefillLegs: ps.activeN, DecodeSlots: ps.decN, DecodeTokens: ps.decTokens,
				DecodeBudgeted: ps.decOutN, DecodeOutputTokens: ps.decOut}
		}
		if own != nil {
			leaveOut(&l, own, k)
		}
		if t.notify != nil {
			// an admission forecast reads these pods: the next sync fetches the other replicas' share
			t.interest[k] = t.clock.Now()
			if rem, ok := t.remote[k]; ok {
				l.DecodeSlots += int(math.Round(rem.charges))
				l.DecodeTokens += rem.tokens
				l.DecodeBudgeted += int(math.Round(rem.budgeted))
				l.DecodeOutputTokens += rem.output
				l.PrefillTokens += rem.prefillTokens
				l.PrefillLegs += int(math.Round(rem.prefillLegs))
			}
		}
		out[i] = l
	}
}

// leaveOut takes a request's own open charges on pod k out of its leases.
func leaveOut(l *tokenload.Leases, e *reqEntry, k tokenload.PodKey) {
	if pp := e.prefill; pp != nil && pp.active && pp.pod == k && l.PrefillLegs > 0 {
		l.PrefillLegs--
		l.PrefillTokens = settle(l.PrefillTokens-pp.tokens, l.PrefillLegs)
	}
	if dp := e.decode; dp != nil && dp.open && dp.pod == k && l.DecodeSlots > 0 {
		l.DecodeSlots--
		l.DecodeTokens = settle(l.DecodeTokens-dp.tokens, l.DecodeSlots)
		if dp.out > 0 && l.DecodeBudgeted > 0 {
			l.DecodeBudgeted--
			l.DecodeOutputTokens = settle(l.DecodeOutputTokens-dp.out, l.DecodeBudgeted)
		}
	}
}

// RecordOutputBudget records a request's output budget (its max_tokens) on its decode charge,
// open or to come, so that its pod's leases count the KV the sequence grows to. The ledger's
// own PreRequest calls it: the chargers (the decode scorers) need not know the request's body.
// A request with no charge yet is not tracked (no entry is created for it), and a budget
// recorded twice counts once.
func (t *Tracker) RecordOutputBudget(requestID string, outputTokens int) {
	if requestID == "" || outputTokens <= 0 {
		return
	}
	t.mu.Lock()
	e := t.reqs[requestID]
	if e == nil {
		t.mu.Unlock()
		return
	}
	out := float64(outputTokens)
	e.output = out
	changed := false
	if dp := e.decode; dp != nil && dp.open && dp.out == 0 {
		dp.out = out
		ps := t.pod(dp.pod, t.clock.Now())
		ps.decOut += out
		ps.decOutN++
		changed = true
	}
	t.mu.Unlock()
	if changed && t.notify != nil {
		t.notify()
	}
}
