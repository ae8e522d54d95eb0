package forecastadmitter

import (
	"math"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// The default profile's figures for a 1,000-token prompt: prefill 5 + 32 + 0.65 = 37.65 ms,
// KV transfer 2 + 2.62 = 4.62 ms, a lone decode step 6.8 + 0.05 + 0.000056 × 1,064 = 6.91 ms.
func TestPredict(t *testing.T) {
	const ttft, tpot = time.Second, 50 * time.Millisecond
	idleP := Pod{Kind: KindPrefill}
	idleD := Pod{Kind: KindDecode}
	// one 40,000-token leg queued: 20 chunks × 5 + 40,000 × 0.032 + 6.5e-7 × 40,000² = 2,420 ms
	// of prefill ahead
	busyP := Pod{Kind: KindPrefill, Leases: tokenload.Leases{PrefillTokens: 40160, PrefillLegs: 1}}
	// 900 sequences batched: 6.8 + 0.05 × 901 + KV ≥ 52 ms a step
	fullBatch := Pod{Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 900, DecodeTokens: 100}}
	noKV := Pod{Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 1, DecodeTokens: 399000}}
	req := Demand{PromptTokens: 1000, OutputTokens: 128}
	tests := []struct {
		name                string
		pods                []Pod
		d                   Demand
		wantMet             bool
		wantTTFTms          float64 // 0 = not checked
		wantTPOTms          float64
		wantServing, wantRm int
	}{
		{name: "idle pool: prefill + transfer + first step", pods: []Pod{idleP, idleD}, d: req, wantMet: true,
			wantTTFTms: 37.65 + 4.62 + 6.9096, wantTPOTms: 6.9096, wantServing: 1, wantRm: 1},
		{name: "prefill queue ahead outlasts the TTFT", pods: []Pod{busyP, idleD}, d: req,
			wantTTFTms: 2420 + 37.65 + 4.62 + 6.9096, wantServing: 1, wantRm: 1},
		{name: "the least busy prefill pod is the placement", pods: []Pod{busyP, idleP, idleD}, d: req, wantMet: true,
			wantTTFTms: 37.65 + 4.62 + 6.9096, wantServing: 1, wantRm: 1},
		{name: "decode-only request skips the prefill queue", pods: []Pod{busyP, idleD},
			d: Demand{PromptTokens: 1000, OutputTokens: 128, DecodeOnly: true}, wantMet: true,
			wantTTFTms: 37.65 + 6.9096, wantServing: 1, wantRm: 1},
		{name: "a full batch misses the TPOT", pods: []Pod{idleP, fullBatch}, d: req, wantServing: 1, wantRm: 1},
		{name: "the scraped batch is a floor on the ledger's", pods: []Pod{idleP, {Kind: KindDecode, Scraped: 900}}, d: req,
			wantServing: 1, wantRm: 1},
		{name: "a decode pod with room is the placement", pods: []Pod{idleP, fullBatch, idleD}, d: req, wantMet: true,
			wantTPOTms: 6.9096, wantServing: 2, wantRm: 2},
		{name: "no KV room: no placement", pods: []Pod{idleP, noKV}, d: req, wantServing: 1},
		{name: "the scraped KV capacity overrides the profile's", pods: []Pod{idleP, {Kind: KindDecode, KVCapacity: 1000}}, d: req,
			wantServing: 1},
		{name: "the scraped KV usage is a floor on the leases'", pods: []Pod{idleP, {Kind: KindDecode, KVUsage: 0.999}}, d: req,
			wantServing: 1},
		{name: "sequences only the scrape shows reserve the mean output too",
			pods: []Pod{idleP, {Kind: KindDecode, Scraped: 200}}, d: Demand{PromptTokens: 1000, OutputTokens: 128, LeasedOutput: 2000},
			wantServing: 1},
		{name: "requests waiting for the engine's next step leave a pod with room a placement",
			pods: []Pod{idleP, {Kind: KindDecode, Scraped: 3, Leases: tokenload.Leases{DecodeSlots: 3, DecodeTokens: 3000}}}, d: req,
			wantMet: true, wantServing: 1, wantRm: 1},
		{name: "leased sequences reserve the profile's mean output",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 100, DecodeTokens: 100000}}}, d: req,
			wantMet: true, wantServing: 1, wantRm: 1},
		{name: "long outputs of the leased sequences fill the KV cache",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 100, DecodeTokens: 100000}}},
			d:    Demand{PromptTokens: 1000, OutputTokens: 128, LeasedOutput: 3000}, wantServing: 1},
		{name: "the leases' own output budgets fill the KV cache, whatever the admitted mean",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 100, DecodeTokens: 100000,
				DecodeBudgeted: 100, DecodeOutputTokens: 300000}}}, d: req, wantServing: 1},
		{name: "leases without a budget take the mean, those with one their own",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 100, DecodeTokens: 100000,
				DecodeBudgeted: 50, DecodeOutputTokens: 150000}}},
			d: Demand{PromptTokens: 1000, OutputTokens: 128, LeasedOutput: 3000}, wantServing: 1},
		{name: "short budgets leave room where the mean would not",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 100, DecodeTokens: 100000,
				DecodeBudgeted: 100, DecodeOutputTokens: 12800}}},
			d: Demand{PromptTokens: 1000, OutputTokens: 128, LeasedOutput: 3000}, wantMet: true, wantServing: 1, wantRm: 1},
		{name: "the step's KV: each held sequence half-way through its own budget",
			pods: []Pod{idleP, {Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 10, DecodeTokens: 10000,
				DecodeBudgeted: 10, DecodeOutputTokens: 20000}}}, d: req, wantMet: true,
			wantTPOTms: 6.8 + 0.05*11 + 0.000056*(10000+10000+1000+64), wantServing: 1, wantRm: 1},
		{name: "nothing decodes: nothing serving", pods: []Pod{idleP, {Kind: KindNone}}, d: req},
		{name: "no prefill tier: the decode pod prefills", pods: []Pod{idleD}, d: req, wantMet: true,
			wantTTFTms: 37.65 + 6.9096, wantServing: 1, wantRm: 1},
		{name: "queued legs are costed at their mean length",
			pods: []Pod{{Kind: KindPrefill, Leases: tokenload.Leases{PrefillTokens: 2 * 1160, PrefillLegs: 2}}, idleD}, d: req, wantMet: true,
			wantTTFTms: 2*37.65 + 37.65 + 4.62 + 6.9096, wantServing: 1, wantRm: 1},
		{name: "combined pod: its own prefill queue, no transfer",
			pods: []Pod{idleP, {Kind: KindCombined, Leases: tokenload.Leases{PrefillTokens: 1160, PrefillLegs: 1}}}, d: req, wantMet: true,
			wantTTFTms: 37.65 + 37.65 + 6.9096, wantServing: 1, wantRm: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := DefaultCost().Predict(tc.pods, tc.d, ttft, tpot, 160)
			if f.Met != tc.wantMet || f.Serving != tc.wantServing || f.Room != tc.wantRm {
				t.Fatalf("met %v serving %d room %d, want %v %d %d (forecast %+v)", f.Met, f.Serving, f.Room,
					tc.wantMet, tc.wantServing, tc.wantRm, f)
			}
			if tc.wantTTFTms > 0 && math.Abs(ms(f.TTFT)-tc.wantTTFTms) > 0.01 {
				t.Errorf("TTFT %.3f ms, want %.3f", ms(f.TTFT), tc.wantTTFTms)
			}
			if tc.wantTPOTms > 0 && math.Abs(ms(f.TPOT)-tc.wantTPOTms) > 0.01 {
				t.Errorf("TPOT %.3f ms, want %.3f", ms(f.TPOT), tc.wantTPOTms)
			}
		})
	}
}

// TestPredictPicksMostSlack: of two placements that both meet the objective the forecast
// reports the one furthest inside it, and of two that miss, the nearer miss.
func TestPredictPicksMostSlack(t *testing.T) {
	light := Pod{Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 10, DecodeTokens: 10000}}
	heavy := Pod{Kind: KindDecode, Leases: tokenload.Leases{DecodeSlots: 400, DecodeTokens: 100000}}
	f := DefaultCost().Predict([]Pod{heavy, light}, Demand{PromptTokens: 100}, time.Second, time.Second, 160)
	if want := DefaultCost().stepMs(11, 10000+10*64+100+64); math.Abs(ms(f.TPOT)-want) > 0.01 {
		t.Fatalf("TPOT %.3f ms, want the light pod's %.3f", ms(f.TPOT), want)
	}
}
