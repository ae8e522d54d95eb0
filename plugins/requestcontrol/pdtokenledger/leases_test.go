package pdtokenledger

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// TestLeases pins what an admission forecast reads: open prefill active parts, open decode
// slots with their prompt KV and output budgets, each gone once its part is released, and a
// request's own charges left out when it is forecast again on its pick.
func TestLeases(t *testing.T) {
	const p, d, other tokenload.PodKey = "ns/p", "ns/d", "ns/unknown"
	// chargeAB is where most cases start: a (1,160 prefill and 1,000 decode tokens) and b (660
	// and 500) charged on p and d.
	chargeAB := func(tr *Tracker) {
		chargeBoth(tr, "a", p, d, 1160, 1000)
		chargeBoth(tr, "b", p, d, 660, 500)
	}
	tests := []struct {
		name    string
		do      func(tr *Tracker)
		exclude string
		want    [3]tokenload.Leases // p, d, other
	}{
		{name: "empty ledger", do: func(*Tracker) {}},
		{name: "two requests charged", do: chargeAB,
			want: [3]tokenload.Leases{{PrefillTokens: 1820, PrefillLegs: 2}, {DecodeSlots: 2, DecodeTokens: 1500}, {}}},
		{name: "prefill leg done: the decode lease stays",
			do: func(tr *Tracker) {
				chargeAB(tr)
				tr.ReleasePrefillActive("a")
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 2, DecodeTokens: 1500}, {}}},
		{name: "end of stream releases everything",
			do: func(tr *Tracker) {
				chargeAB(tr)
				tr.ReleaseAll("a")
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 1, DecodeTokens: 500}, {}}},
		{name: "output budgets recorded after the charge, one request without max_tokens",
			do: func(tr *Tracker) {
				chargeAB(tr)
				chargeBoth(tr, "c", p, d, 160, 100)
				tr.RecordOutputBudget("a", 4000)
				tr.RecordOutputBudget("a", 4000) // counted once
				tr.RecordOutputBudget("b", 200)
				tr.RecordOutputBudget("c", -1)
				tr.RecordOutputBudget("unknown", 300) // no charge: not tracked
			},
			want: [3]tokenload.Leases{{PrefillTokens: 1980, PrefillLegs: 3},
				{DecodeSlots: 3, DecodeTokens: 1600, DecodeBudgeted: 2, DecodeOutputTokens: 4200}, {}}},
		{name: "a budget leaves with its sequence",
			do: func(tr *Tracker) {
				chargeAB(tr)
				tr.RecordOutputBudget("a", 4000)
				tr.RecordOutputBudget("b", 200)
				tr.ReleaseAll("a")
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 1, DecodeTokens: 500, DecodeBudgeted: 1, DecodeOutputTokens: 200}, {}}},
		{name: "a budget carried in the charge, and kept when the request is charged again",
			do: func(tr *Tracker) {
				tr.Atomically(func(tx tokenload.Tx) {
					tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "a", Pod: d, Tokens: 1000, OutputTokens: 3000})
				})
				tr.RecordOutputBudget("b", 50)
				chargeBoth(tr, "b", p, d, 660, 500)
				tr.RecordOutputBudget("b", 700)
				chargeBoth(tr, "b", p, d, 660, 500) // re-picked: the budget moves with it
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 2, DecodeTokens: 1500, DecodeBudgeted: 2, DecodeOutputTokens: 3700}, {}}},
		{name: "the forecast request's own charges left out",
			do: func(tr *Tracker) {
				chargeAB(tr)
				tr.RecordOutputBudget("a", 4000)
				tr.RecordOutputBudget("b", 200)
			},
			exclude: "b",
			want:    [3]tokenload.Leases{{PrefillTokens: 1160, PrefillLegs: 1}, {DecodeSlots: 1, DecodeTokens: 1000, DecodeBudgeted: 1, DecodeOutputTokens: 4000}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, _ := newTestTracker(t, nil)
			tc.do(tr)
			got := make([]tokenload.Leases, 3)
			tr.Leases([]tokenload.PodKey{p, d, other}, got, tc.exclude)
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("pod %d: leases %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
