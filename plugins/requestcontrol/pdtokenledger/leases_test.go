package pdtokenledger

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// TestLeases pins what an admission forecast reads: open prefill active parts, open decode
// slots and their prompt KV, each gone once its part is released.
func TestLeases(t *testing.T) {
	const p, d, other tokenload.PodKey = "ns/p", "ns/d", "ns/unknown"
	tests := []struct {
		name string
		do   func(tr *Tracker)
		want [3]tokenload.Leases // p, d, other
	}{
		{name: "empty ledger", do: func(*Tracker) {}},
		{name: "two requests charged",
			do: func(tr *Tracker) {
				chargeBoth(tr, "a", p, d, 1160, 1000)
				chargeBoth(tr, "b", p, d, 660, 500)
			},
			want: [3]tokenload.Leases{{PrefillTokens: 1820, PrefillLegs: 2}, {DecodeSlots: 2, DecodeTokens: 1500}, {}}},
		{name: "prefill leg done: the decode lease stays",
			do: func(tr *Tracker) {
				chargeBoth(tr, "a", p, d, 1160, 1000)
				chargeBoth(tr, "b", p, d, 660, 500)
				tr.ReleasePrefillActive("a")
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 2, DecodeTokens: 1500}, {}}},
		{name: "end of stream releases everything",
			do: func(tr *Tracker) {
				chargeBoth(tr, "a", p, d, 1160, 1000)
				chargeBoth(tr, "b", p, d, 660, 500)
				tr.ReleaseAll("a")
			},
			want: [3]tokenload.Leases{{PrefillTokens: 660, PrefillLegs: 1}, {DecodeSlots: 1, DecodeTokens: 500}, {}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, _ := newTestTracker(t, nil)
			tc.do(tr)
			got := make([]tokenload.Leases, 3)
			tr.Leases([]tokenload.PodKey{p, d, other}, got)
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("pod %d: leases %+v, want %+v", i, got[i], tc.want[i])
				}
			}
		})
	}
}
