package aibrixpdpair

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func TestRemainingWork(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	// A follow-up of 4,350 tokens in 100 blocks whose first 97 the previous turn's pods hold.
	const promptTokens, totalBlocks, heldBlocks = 4350, 100, 97
	tests := []struct {
		name        string
		rw          *RemainingWork
		holders     []string // pods that served the history (hold 97 of the 100 blocks)
		prefillLoad map[string]float64
		decodeLoad  map[string]float64
		decodeFirst *DecodeFirst
		want        string // roleset
		wantLocal   bool
	}{
		{"without it the least loaded prefill pod wins", nil, []string{"ns/a-p", "ns/a-d"},
			map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, nil, nil, "b", false},
		{"a follow-up stays on the decode pod that holds its history, which prefills the new turn",
			&RemainingWork{}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, nil, nil, "a", true},
		{"a new turn larger than a chunk goes to the prefill pod that holds the history, busy or not",
			&RemainingWork{LocalPrefillMaxTokens: 100}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 1000, "ns/b-p": 0}, nil, nil, "a", false},
		{"unless the holder's queue is longer than computing everything elsewhere",
			&RemainingWork{LocalPrefillMaxTokens: 100}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 12000, "ns/b-p": 0}, nil, nil, "b", false},
		{"nothing cached anywhere: the least loaded pair", &RemainingWork{}, nil,
			map[string]float64{"ns/a-p": 5000, "ns/b-p": 0}, nil, nil, "b", false},
		{"idle prefill pods: decodeFirst weighs decode 5x, so the holder's busier decode pod loses without remaining work",
			nil, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 0, "ns/b-p": 0},
			map[string]float64{"ns/a-d": 30000, "ns/b-d": 0}, &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000}, "b", false},
		{"with it the tokens the holder need not compute outweigh its decode load (decodeWeight replaces decodeFirst's)",
			&RemainingWork{LocalPrefillMaxTokens: 100}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 0, "ns/b-p": 0},
			map[string]float64{"ns/a-d": 30000, "ns/b-d": 0}, &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000}, "a", false},
		{"a decodeWeight as high as decodeFirst's buries it again",
			&RemainingWork{LocalPrefillMaxTokens: 100, DecodeWeight: new(5.0)}, []string{"ns/a-p", "ns/a-d"}, map[string]float64{"ns/a-p": 0, "ns/b-p": 0},
			map[string]float64{"ns/a-d": 30000, "ns/b-d": 0}, &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000}, "b", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, pods, eps := twoRolesets(tt.prefillLoad, tt.decodeLoad)
			for i, ep := range eps {
				held := 1 // the shared first block, everywhere
				if slices.Contains(tt.holders, pods[i].Key) {
					held = heldBlocks
				}
				if tt.holders == nil {
					held = 0
				}
				ep.Put(attrprefix.PrefixCacheMatchInfoKey, attrprefix.NewPrefixCacheMatchInfo(held, totalBlocks, 16))
			}
			pods, _ = podsOf(eps)
			s := newSel(t, l.source())
			d, err := s.Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptTokens: promptTokens,
				BodyTokens: promptTokens, RemainingWork: tt.rw, DecodeFirst: tt.decodeFirst, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.Roleset != tt.want || d.DecodeOnly != tt.wantLocal {
				t.Fatalf("roleset %q decode-only %v, want %q %v; notes %q", d.Roleset, d.DecodeOnly, tt.want, tt.wantLocal, d.Notes)
			}
			if tt.wantLocal && (d.Cause != contract.CauseCached || d.Prefill != nil) {
				t.Fatalf("a local prefill must be decode-only with cause cached: %+v", d)
			}
			if !tt.wantLocal && d.Cause == contract.CausePrefillBackedUp {
				t.Fatalf("a prefill pool that keeps up disaggregates: %+v", d)
			}
			if tt.rw != nil && !tt.wantLocal && tt.want == "a" {
				// The holder is charged the prefill work it will do: the 3 blocks it lacks.
				want := fmt.Sprintf("prefill ns/a-p %d", 3500+promptTokens*(100-heldBlocks)/100)
				if !slices.Contains(l.charges, want) {
					t.Fatalf("charges %q, want %q", l.charges, want)
				}
			}
		})
	}
}

// twoRolesets is rolesets a and b of one prefill and one decode pod each, with a ledger
// carrying the given loads by pod key.
func twoRolesets(prefillLoad, decodeLoad map[string]float64) (*fakeLedger, []podmodel.Pod, []fwksched.Endpoint) {
	l := newFakeLedger()
	for pod, load := range prefillLoad {
		l.prefill[tokenload.PodKey(pod)] = load
	}
	for pod, load := range decodeLoad {
		l.decode[tokenload.PodKey(pod)] = load
	}
	pods, eps := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	return l, pods, eps
}

func TestPrefillBackedUp(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	// A first turn nobody holds: 6,000 tokens. At 10,000 tokens a second and a 1 s target the
	// prefill pool misses it once the least queued prefill pod has more than 4,000 tokens.
	const promptTokens = 6000
	backedUp := func(maxLocal int) *RemainingWork {
		return &RemainingWork{PrefillBackedUp: &PrefillBackedUp{TTFT: "1s", PrefillTokensPerSecond: 10000, MaxLocalTokens: maxLocal}}
	}
	scoped := func(scope string) *RemainingWork {
		rw := backedUp(0)
		rw.PrefillBackedUp.Scope = scope
		return rw
	}
	tests := []struct {
		name        string
		rw          *RemainingWork
		prefillLoad map[string]float64
		decodeLoad  map[string]float64
		wantLocal   bool
		want        string // decode pod
	}{
		{"without the rule a backed-up pool still disaggregates", &RemainingWork{},
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 8000}, nil, false, "ns/b-d"},
		{"the least loaded prefill pod meets the target: disaggregate", backedUp(0),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 3000}, nil, false, "ns/b-d"},
		{"every prefill pod misses it: the decode pod with slack prefills", backedUp(0),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 8000}, map[string]float64{"ns/a-d": 50000, "ns/b-d": 1000}, true, "ns/b-d"},
		{"only decode pods at or under the mean load prefill locally", backedUp(0),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 30000}, map[string]float64{"ns/a-d": 50000, "ns/b-d": 1000}, true, "ns/b-d"},
		{"a prompt larger than maxLocalTokens still goes remote", backedUp(4000),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 8000}, nil, false, "ns/b-d"},
		{"fleet scope: b's prefill pod meets the target, so a's decode pod may not prefill, and the prefill queues send the request to b", scoped(BackedUpScopeFleet),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 3000}, map[string]float64{"ns/a-d": 1000, "ns/b-d": 50000}, false, "ns/b-d"},
		{"pair scope: a's decode pod, which can only pair with a's backed-up prefill pod, prefills itself", scoped(BackedUpScopePair),
			map[string]float64{"ns/a-p": 9000, "ns/b-p": 3000}, map[string]float64{"ns/a-d": 1000, "ns/b-d": 50000}, true, "ns/a-d"},
		{"pair scope: a pair whose prefill pod keeps up disaggregates", scoped(BackedUpScopePair),
			map[string]float64{"ns/a-p": 3000, "ns/b-p": 3000}, map[string]float64{"ns/a-d": 1000, "ns/b-d": 50000}, false, "ns/a-d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, _, eps := twoRolesets(tt.prefillLoad, tt.decodeLoad)
			pods, _ := podsOf(eps)
			d, err := newSel(t, l.source()).Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptTokens: promptTokens,
				BodyTokens: promptTokens, RemainingWork: tt.rw, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.DecodeOnly != tt.wantLocal || d.Decode.Key != tt.want {
				t.Fatalf("decode-only %v on %s, want %v on %s; notes %q", d.DecodeOnly, d.Decode.Key, tt.wantLocal, tt.want, d.Notes)
			}
			if tt.wantLocal != (d.Cause == contract.CausePrefillBackedUp) {
				t.Fatalf("cause %q, want prefill_backed_up exactly when local", d.Cause)
			}
		})
	}
}

// TestPrefillBackedUpMissedPairs: once a pair's prefill pod would miss the TTFT target and its
// decode pod may not prefill, the pairs are scored on their prefill queues, not decodeFirst's
// weight; with skipMissedPairs such a pair leaves the candidates while another meets the target.
func TestPrefillBackedUpMissedPairs(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	// 6,000 tokens nobody holds; at 10,000 tokens a second and a 1 s target a pair misses it
	// once its prefill pod has more than 4,000 tokens queued.
	const promptTokens = 6000
	rule := func(scope string, maxLocal int, skip bool) *RemainingWork {
		return &RemainingWork{PrefillBackedUp: &PrefillBackedUp{TTFT: "1s", PrefillTokensPerSecond: 10000, MaxLocalTokens: maxLocal,
			Scope: scope, SkipMissedPairs: skip}}
	}
	decodeFirst := &DecodeFirst{Weight: 5, PrefillScoreBelow: 3000}
	tests := []struct {
		name                    string
		rw                      *RemainingWork
		decodeFirst             *DecodeFirst
		prefillLoad, decodeLoad [3]float64 // rolesets a, b, c
		want                    string     // decode pod, always with a prefill leg
	}{
		{"a's idle decode pod does not draw the request onto a's backed-up prefill pod", rule("", 0, false), nil,
			[3]float64{9000, 3000, 3500}, [3]float64{0, 40000, 40000}, "ns/b-d"},
		{"pair scope: a's decode pod may not prefill a prompt over maxLocalTokens, so the prefill queues decide there too", rule(BackedUpScopePair, 4000, false), nil,
			[3]float64{9000, 3000, 3500}, [3]float64{0, 40000, 40000}, "ns/b-d"},
		{"once a pair misses, c's idle prefill pod beats b's 3,500 tokens that decodeFirst would discount", rule("", 0, false), decodeFirst,
			[3]float64{9000, 3500, 0}, [3]float64{50000, 0, 10000}, "ns/c-d"},
		{"no pair misses: decodeFirst decides as before", rule("", 0, false), decodeFirst,
			[3]float64{3000, 2000, 0}, [3]float64{50000, 0, 10000}, "ns/b-d"},
		{"without the rule a's idle decode pod wins", &RemainingWork{}, nil,
			[3]float64{9000, 3000, 3500}, [3]float64{0, 40000, 40000}, "ns/a-d"},
		{"c misses by more, so a's queue past the target still scores best", rule("", 0, false), nil,
			[3]float64{9000, 3000, 20000}, [3]float64{0, 40000, 40000}, "ns/a-d"},
		{"skipMissedPairs: a and c leave the candidates while b meets the target", rule("", 0, true), nil,
			[3]float64{9000, 3000, 20000}, [3]float64{0, 40000, 40000}, "ns/b-d"},
		{"skipMissedPairs: when no pair meets the target none leaves", rule("", 4000, true), nil,
			[3]float64{9000, 8000, 20000}, [3]float64{0, 40000, 40000}, "ns/a-d"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newFakeLedger()
			var specs []podSpec
			for i, rs := range []string{"a", "b", "c"} {
				l.prefill[tokenload.PodKey("ns/"+rs+"-p")] = tt.prefillLoad[i]
				l.decode[tokenload.PodKey("ns/"+rs+"-d")] = tt.decodeLoad[i]
				specs = append(specs, podSpec{name: rs + "-p", role: "prefill", roleset: rs}, podSpec{name: rs + "-d", role: "decode", roleset: rs})
			}
			pods, _ := mkPods(specs...)
			d, err := newSel(t, l.source()).Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptTokens: promptTokens,
				BodyTokens: promptTokens, RemainingWork: tt.rw, DecodeFirst: tt.decodeFirst, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.DecodeOnly || d.Prefill == nil || d.Decode.Key != tt.want {
				t.Fatalf("decode-only %v on %s, want a prefill leg and %s; notes %q", d.DecodeOnly, d.Decode.Key, tt.want, d.Notes)
			}
		})
	}
}

func TestRemainingWorkParams(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
	}{
		{"on with token_load", `{"prefillScorePolicy":"token_load","remainingWork":{}}`, ""},
		{"a local bound", `{"prefillScorePolicy":"hybrid_cache_load","remainingWork":{"localPrefillMaxTokens":4096}}`, ""},
		{"a decode weight", `{"prefillScorePolicy":"token_load","remainingWork":{"decodeWeight":0.2}}`, ""},
		{"negative decode weight", `{"prefillScorePolicy":"token_load","remainingWork":{"decodeWeight":-1}}`, "remainingWork.decodeWeight"},
		{"negative bound", `{"prefillScorePolicy":"token_load","remainingWork":{"localPrefillMaxTokens":-1}}`, "remainingWork.localPrefillMaxTokens"},
		{"load-conditional", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"800ms","prefillTokensPerSecond":20000,"maxLocalTokens":4096}}}`, ""},
		{"load-conditional without a target", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{}}}`, "remainingWork.prefillBackedUp.ttft"},
		{"load-conditional with a bad target", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"-1s"}}}`, "remainingWork.prefillBackedUp.ttft"},
		{"load-conditional with a negative rate", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","prefillTokensPerSecond":-5}}}`, "prefillBackedUp.prefillTokensPerSecond"},
		{"load-conditional with a negative bound", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","maxLocalTokens":-5}}}`, "prefillBackedUp.maxLocalTokens"},
		{"load-conditional with a TPOT target", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","tpot":"50ms"}}}`, ""},
		{"load-conditional with a bad TPOT target", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","tpot":"fast"}}}`, "remainingWork.prefillBackedUp.tpot"},
		{"load-conditional per pair", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","scope":"pair"}}}`, ""},
		{"load-conditional with an unknown scope", `{"prefillScorePolicy":"token_load","remainingWork":{"prefillBackedUp":{"ttft":"1s","scope":"pool"}}}`, "remainingWork.prefillBackedUp.scope"},
		{"a policy whose scores are not tokens", `{"prefillScorePolicy":"least_request","remainingWork":{}}`, "needs prefillScorePolicy"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := ParseParams(Type, "pair", []byte(tt.raw), pluginkit.MapEnv(nil), func(string) {})
			if err == nil {
				err = p.Validate()
			}
			if (err == nil) != (tt.wantErr == "") || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
				t.Fatalf("err = %v, want %q", err, tt.wantErr)
			}
		})
	}
}

func podsOf(eps []fwksched.Endpoint) ([]podmodel.Pod, []fwksched.Endpoint) {
	pods := make([]podmodel.Pod, len(eps))
	for i, ep := range eps {
		pods[i] = podmodel.FromEndpoint(ep)
	}
	return pods, eps
}

// The TPOT test stretches the decode pod's measured TPOT (running ÷ generation throughput) by
// the share of its sequences' remaining time (running ÷ drain rate) the local prefill stalls
// them, and holds it to the target; without the metrics it cannot tell.
func TestTPOTSlack(t *testing.T) {
	b := &PrefillBackedUp{TTFT: "1s", TPOT: "50ms"}
	// 20 sequences at 500 tokens/s: 40 ms a token; 2 finish a second, so 10 s left each.
	busy := &engineattr.Metrics{Running: 20, HasRunning: true, GenThroughput: 500, HasGenThroughput: true, DrainRate1m: 2, HasDrainRate1m: true}
	tests := []struct {
		name        string
		b           *PrefillBackedUp
		m           *engineattr.Metrics
		tokens      float64
		slack, know bool
	}{
		{"no target: the mean-load test decides", &PrefillBackedUp{TTFT: "1s"}, busy, 1000, false, false},
		{"no metrics", b, nil, 1000, false, false},
		{"idle pod", b, &engineattr.Metrics{HasRunning: true}, 8192, true, true},
		{"no throughput yet", b, &engineattr.Metrics{Running: 3, HasRunning: true}, 1000, false, false},
		// 1 s of prefill stretches 10 s by 10 %: 44 ms ≤ 50 ms.
		{"short stall fits", b, busy, 10000, true, true},
		// 4 s stretches it by 40 %: 56 ms > 50 ms.
		{"long stall does not", b, busy, 40000, false, true},
		{"already over the target", b, &engineattr.Metrics{Running: 30, HasRunning: true, GenThroughput: 500, HasGenThroughput: true, DrainRate1m: 2, HasDrainRate1m: true}, 100, false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			slack, know := tt.b.tpotSlack(tt.m, tt.tokens, 10000)
			if slack != tt.slack || know != tt.know {
				t.Fatalf("slack %v known %v, want %v %v", slack, know, tt.slack, tt.know)
			}
		})
	}
}

// With a TPOT target, a backed-up prefill pool still goes remote when the decode pods' own
// TPOT, stretched by the local prefill, would miss it; the same pods under the target prefill
// locally.
func TestPrefillBackedUpTPOT(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	rw := &RemainingWork{PrefillBackedUp: &PrefillBackedUp{TTFT: "1s", PrefillTokensPerSecond: 10000, TPOT: "50ms"}}
	for _, tt := range []struct {
		name      string
		running   float64 // on each decode pod, at 500 tokens/s and 2 finishing a second
		wantLocal bool
	}{
		{"decode pods at 20 ms a token prefill locally", 10, true},
		{"decode pods at 48 ms a token do not", 24, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			l, _, eps := twoRolesets(map[string]float64{"ns/a-p": 9000, "ns/b-p": 8000}, nil)
			for _, ep := range eps {
				if ep.GetMetadata().Labels[podmodel.LabelRoleName] == "decode" {
					ep.Put(engineattr.AttributeKey, &engineattr.Metrics{Running: tt.running, HasRunning: true,
						GenThroughput: 500, HasGenThroughput: true, DrainRate1m: 2, HasDrainRate1m: true})
				}
			}
			pods, _ := podsOf(eps)
			d, err := newSel(t, l.source()).Select(Input{RequestID: "r", Pods: pods, Knobs: k, PromptTokens: 6000,
				BodyTokens: 6000, RemainingWork: rw, Explain: true})
			if err != nil {
				t.Fatal(err)
			}
			if d.DecodeOnly != tt.wantLocal {
				t.Fatalf("decode-only %v, want %v; notes %q", d.DecodeOnly, tt.wantLocal, d.Notes)
			}
		})
	}
}
