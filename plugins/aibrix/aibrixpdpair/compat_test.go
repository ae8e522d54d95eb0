package aibrixpdpair

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/engineattr"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// hpod is a pod for the compatibility tables: llm-d-labelled (pairs across the fleet) unless a
// roleset is given, declaring the handoff labels in decl.
func hpod(name, role, roleset string, decl map[string]string) podSpec {
	s := podSpec{name: name, roleset: roleset, extra: map[string]string{}}
	if roleset != "" {
		s.role = role
	} else {
		s.extra[podmodel.LabelLLMDRole] = role
	}
	for k, v := range decl {
		s.extra[k] = v
	}
	return s
}

func conn(c string) map[string]string { return map[string]string{handoffcompat.LabelConnector: c} }
func rev(r string) map[string]string  { return map[string]string{handoffcompat.LabelRevision: r} }

func specOfEndpoint(ep fwksched.Endpoint) handoffcompat.Spec {
	s, _ := handoffcompat.Of(ep.GetMetadata().Labels)
	return s
}

func TestPairsAreCompatible(t *testing.T) {
	tests := []struct {
		name string
		pods []podSpec
		// want lists the decode→prefill pairs that may be made; nil means any pair may
		want map[string][]string
	}{
		{name: "nothing declared pairs freely", pods: []podSpec{
			hpod("p1", "prefill", "", nil), hpod("p2", "prefill", "", nil), hpod("d1", "decode", "", nil), hpod("d2", "decode", "", nil)}},
		{name: "two connectors", pods: []podSpec{
			hpod("p-nixl", "prefill", "", conn("nixl")), hpod("p-moon", "prefill", "", conn("Mooncake")),
			hpod("d-nixl", "decode", "", conn("NIXL")), hpod("d-moon", "decode", "", conn("mooncake"))},
			want: map[string][]string{"d-nixl": {"p-nixl"}, "d-moon": {"p-moon"}}},
		{name: "rolling revision", pods: []podSpec{
			hpod("p-a", "prefill", "", rev("a")), hpod("p-b", "prefill", "", rev("b")),
			hpod("d-a", "decode", "", rev("a")), hpod("d-b", "decode", "", rev("b")), hpod("d-b2", "decode", "", rev("b"))},
			want: map[string][]string{"d-a": {"p-a"}, "d-b": {"p-b"}, "d-b2": {"p-b"}}},
		{name: "a prefill pod that declares nothing pairs with every class", pods: []podSpec{
			hpod("p-any", "prefill", "", nil), hpod("d-nixl", "decode", "", conn("nixl")), hpod("d-moon", "decode", "", conn("mooncake"))},
			want: map[string][]string{"d-nixl": {"p-any"}, "d-moon": {"p-any"}}},
		{name: "decode pod without a compatible prefill pod is not paired", pods: []podSpec{
			hpod("p-a", "prefill", "", rev("a")), hpod("d-a", "decode", "", rev("a")), hpod("d-b", "decode", "", rev("b"))},
			want: map[string][]string{"d-a": {"p-a"}}},
		{name: "inside an AIBrix roleset", pods: []podSpec{
			hpod("a-p-nixl", "prefill", "a", conn("nixl")), hpod("a-p-moon", "prefill", "a", conn("mooncake")),
			hpod("a-d-moon", "decode", "a", conn("mooncake")),
			hpod("b-p-nixl", "prefill", "b", conn("nixl")), hpod("b-d-nixl", "decode", "b", conn("nixl"))},
			want: map[string][]string{"a-d-moon": {"a-p-moon"}, "b-d-nixl": {"b-p-nixl"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, eps := mkPods(tc.pods...)
			pl := newPlugin(t, `{}`)
			seen := map[string]bool{}
			for i := range 60 {
				cs := fwksched.NewCycleState()
				// distinct prompts and requests left in flight: neither prefix affinity nor an idle
				// fleet keeps picking one pair
				req := request(fmt.Sprintf("r%d", i), nil, fmt.Sprintf("%03d prompt", i))
				ctx := contract.WithAnswerSlot(context.Background())
				if out := pl.Filter(ctx, cs, req, eps); len(out) != 1 {
					t.Fatalf("decode filter returned %d endpoints", len(out))
				}
				if a := contract.Recorded(ctx); a != nil {
					t.Fatalf("no early answer expected, got %v", a)
				}
				st, err := fwksched.ReadCycleStateKey[*PairState](cs, StateKey)
				if err != nil || st.Prefill == nil || st.Decision.Prefill == nil {
					t.Fatalf("no pair published: %v %+v", err, st)
				}
				d, p := st.Decision.Decode, st.Decision.Prefill
				if !handoffcompat.Compatible(specOfEndpoint(st.Decode), specOfEndpoint(st.Prefill)) {
					t.Fatalf("incompatible pair %s + %s", d.Name, p.Name)
				}
				if d.Roleset != rolesetOf(d.Roleset) || p.Roleset != d.Roleset || st.Decision.Roleset != d.Roleset {
					t.Fatalf("roleset names leak the handoff class: %q %q %q", d.Roleset, p.Roleset, st.Decision.Roleset)
				}
				pair := d.Name + "→" + p.Name
				seen[pair] = true
				if tc.want != nil && !slices.Contains(tc.want[d.Name], p.Name) {
					t.Fatalf("pair %s not allowed (want %v)", pair, tc.want)
				}
			}
			if tc.want != nil {
				for d, ps := range tc.want {
					for _, p := range ps {
						if !seen[d+"→"+p] {
							t.Errorf("pair %s→%s never made in 60 requests (seen %v)", d, p, seen)
						}
					}
				}
			}
		})
	}
}

func TestNoCompatiblePrefillFallback(t *testing.T) {
	pods := []podSpec{hpod("p-a", "prefill", "", rev("a")), hpod("p-a2", "prefill", "", rev("a")), hpod("d-b", "decode", "", rev("b"))}
	tests := []struct {
		name, params string
		wantStatus   int
		fallback     handoffcompat.Fallback
	}{
		{name: "default is local prefill", params: `{}`, fallback: handoffcompat.LocalPrefill},
		{name: "local prefill", params: `{"noCompatiblePrefill":"local-prefill"}`, fallback: handoffcompat.LocalPrefill},
		{name: "error", params: `{"noCompatiblePrefill":"error"}`, wantStatus: http.StatusServiceUnavailable, fallback: handoffcompat.Fail},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, eps := mkPods(pods...)
			pl := newPlugin(t, tc.params)
			c, err := handoffcompat.NewCounter(prometheus.NewRegistry())
			if err != nil {
				t.Fatal(err)
			}
			pl.handoff.once.Do(func() {})
			pl.handoff.counter = c
			cs := fwksched.NewCycleState()
			ctx := contract.WithAnswerSlot(context.Background())
			req := request("r1", nil, "hello world")
			out := pl.Filter(ctx, cs, req, eps)
			a := contract.Recorded(ctx)
			if tc.wantStatus != 0 {
				if a == nil || a.Status != tc.wantStatus || a.Cause != handoffcompat.CauseNoCompatible {
					t.Fatalf("answer = %v, want %d %s", a, tc.wantStatus, handoffcompat.CauseNoCompatible)
				}
			} else {
				if a != nil {
					t.Fatalf("unexpected answer %v", a)
				}
				st, err := fwksched.ReadCycleStateKey[*PairState](cs, StateKey)
				if err != nil || !st.Decision.DecodeOnly || st.Prefill != nil || st.Decision.Cause != handoffcompat.CauseNoCompatible {
					t.Fatalf("want a decode-only pick with cause %s, got %+v", handoffcompat.CauseNoCompatible, st)
				}
				if len(out) != 1 || out[0].GetMetadata().PodName != "d-b" {
					t.Fatalf("decode pick = %v", out)
				}
				if dec := pl.Disaggregate(context.Background(), cs, req, out[0]); dec.Run || dec.Cause != handoffcompat.CauseNoCompatible {
					t.Fatalf("decider must skip prefill: %+v", dec)
				}
			}
			if got := c.Count(handoffcompat.Revision, tc.fallback); got != 1 {
				t.Errorf("pdgate_pd_no_compatible_pair_total{revision,%s} = %g, want 1", tc.fallback, got)
			}
		})
	}
}

func TestNoCompatiblePrefillParameter(t *testing.T) {
	if _, err := ParseParams(Type, "pair", []byte(`{"noCompatiblePrefill":"drop"}`), func(string) (string, bool) { return "", false }, nil); err == nil {
		t.Fatal("an unknown fallback must be refused")
	}
}

func TestHandoffSplitAllocatesNothingWhenUniform(t *testing.T) {
	model := map[string]string{handoffcompat.LabelModel: "m"}
	for name, decl := range map[string]map[string]string{"nothing declared": nil, "one model everywhere": model} {
		pods, _ := mkPods(hpod("p1", "prefill", "a", decl), hpod("d1", "decode", "a", decl), hpod("p2", "prefill", "", decl), hpod("d2", "decode", "", decl))
		in := Input{Pods: pods}
		var h handoffCheck
		if n := testing.AllocsPerRun(200, func() {
			if _, split := h.split(in); split {
				t.Fatal("a uniform fleet was split")
			}
		}); n != 0 {
			t.Errorf("%s: the compatibility check allocates %g times per request", name, n)
		}
	}
}

// BenchmarkSelectPair times the selection with the compatibility check on 64-pod fleets that
// declare nothing, one model on every pod (an AIBrix fleet), and two connectors.
func BenchmarkSelectPair(b *testing.B) {
	for _, fleet := range []string{"undeclared", "one-model", "two-connectors", "engine-metrics"} {
		var specs []podSpec
		for i := range 32 {
			var decl map[string]string
			switch fleet {
			case "one-model":
				decl = map[string]string{handoffcompat.LabelModel: "m"}
			case "two-connectors":
				decl = map[string]string{handoffcompat.LabelConnector: []string{"nixl", "mooncake"}[i%2], handoffcompat.LabelModel: "m"}
			}
			p, d := hpod(fmt.Sprintf("p%d", i), "prefill", "", decl), hpod(fmt.Sprintf("d%d", i), "decode", "", decl)
			if fleet == "engine-metrics" { // what the engine-metrics extractor gives every pod
				p.metrics = &engineattr.Metrics{Running: 2, HasRunning: true, Waiting: 1, HasWaiting: true, KVUsage: 0.3, HasKVUsage: true}
				d.metrics = &engineattr.Metrics{Running: float64(i % 5), HasRunning: true, GenThroughput: 40, HasGenThroughput: true, KVUsage: 0.5, HasKVUsage: true}
			}
			specs = append(specs, p, d)
		}
		pods, _ := mkPods(specs...)
		pl := newPlugin(&testing.T{}, `{}`)
		in := Input{Pods: pods, Knobs: pl.params.Knobs}
		b.Run(fleet, func(b *testing.B) {
			b.ReportAllocs()
			for i := range b.N {
				in.RequestID = fmt.Sprint(i)
				if _, err := pl.selectPair(in); err != nil {
					b.Fatal(err)
				}
				pl.selector.Tracker.Done(in.RequestID)
			}
		})
	}
}

// TestBackedUpClass: during a revision rollout the free pairing would take b's prefill pod,
// which meets the TTFT target, and a's idle decode pod. Checked, the pair score must not trade
// a's TTFT miss for a's idle decode pod; instead that decode pod, which only class a's backed-up
// prefill pod can serve, prefills the prompt itself, its own local prefills in flight counted
// as a queue. AIBrix rolesets, which the operator sizes, keep the fleet rule: no local prefill
// while another roleset's prefill pod meets the target.
func TestBackedUpClass(t *testing.T) {
	k := knobs(func(k *pdknobs.Knobs) {
		k.PrefillScorePolicy, k.DecodeScorePolicy = pdknobs.PrefillTokenLoad, pdknobs.DecodeTokenLoad
	})
	// 6,000 tokens nobody holds; at 10,000 tokens a second and a 1 s target, p-a's 9,000
	// queued tokens miss it and p-b's 3,000 meet it.
	rule := func(scope string) *RemainingWork {
		return &RemainingWork{PrefillBackedUp: &PrefillBackedUp{TTFT: "1s", PrefillTokensPerSecond: 10000, Scope: scope}}
	}
	classes := []podSpec{hpod("p-a", "prefill", "", rev("a")), hpod("d-a", "decode", "", rev("a")),
		hpod("p-b", "prefill", "", rev("b")), hpod("d-b", "decode", "", rev("b"))}
	rolesets := []podSpec{hpod("p-a", "prefill", "rs-a", nil), hpod("d-a", "decode", "rs-a", nil),
		hpod("p-b", "prefill", "rs-b", nil), hpod("d-b", "decode", "rs-b", nil)}
	for _, tc := range []struct {
		name   string
		pods   []podSpec
		rw     *RemainingWork
		queued float64 // local prefill tokens already sent to d-a
		want   string  // the decode pod
		local  bool    // decode-only, cause prefill_backed_up
	}{
		{"without prefillBackedUp the idle decode pod wins, with a's prefill pod", classes, &RemainingWork{}, 0, "d-a", false},
		{"a's idle decode pod prefills the prompt itself: no prefill pod it can use meets the target", classes, rule(""), 0, "d-a", true},
		{"behind 3,000 tokens of its own local prefill it still scores best", classes, rule(""), 3000, "d-a", true},
		{"behind 9,000 it scores worse than class b's pair, whose prefill pod meets the target", classes, rule(""), 9000, "d-b", false},
		{"scope pair: the same local prefill", classes, rule(BackedUpScopePair), 0, "d-a", true},
		{"rolesets: no local prefill while b's prefill pod meets the target", rolesets, rule(""), 0, "d-b", false},
		{"rolesets, scope pair: a's decode pod prefills", rolesets, rule(BackedUpScopePair), 0, "d-a", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := newFakeLedger()
			l.prefill["ns/p-a"], l.prefill["ns/p-b"] = 9000, 3000
			l.decode["ns/d-a"], l.decode["ns/d-b"] = 0, 40000
			pods, _ := mkPods(tc.pods...)
			in := Input{RequestID: "r", Pods: pods, Knobs: k, PromptTokens: 6000, BodyTokens: 6000, RemainingWork: tc.rw, Explain: true}
			var h handoffCheck
			if split, ok := h.split(in); ok {
				in.Pods = split.pods
			}
			sel := newSel(t, l.source())
			if tc.queued > 0 {
				sel.Tracker.RegisterLocal("earlier", "ns/d-a", tc.queued)
			}
			d, err := sel.Select(in)
			if err != nil {
				t.Fatal(err)
			}
			if d.Decode.Name != tc.want || d.DecodeOnly != tc.local {
				t.Fatalf("decode %s, decode-only %v (%s); want %s, decode-only %v; notes %q", d.Decode.Name, d.DecodeOnly, d.Reason, tc.want, tc.local, d.Notes)
			}
			if tc.local {
				if d.Cause != contract.CausePrefillBackedUp {
					t.Fatalf("cause %s, want %s", d.Cause, contract.CausePrefillBackedUp)
				}
				if got := sel.Tracker.LocalTokens("ns/d-a"); got != tc.queued+6000 {
					t.Fatalf("local tokens on d-a %g, want %g", got, tc.queued+6000)
				}
				sel.Tracker.Started("r")
				if got := sel.Tracker.LocalTokens("ns/d-a"); got != tc.queued {
					t.Fatalf("local tokens on d-a once r started %g, want %g", got, tc.queued)
				}
				return
			}
			if d.Prefill == nil || !handoffcompat.Compatible(specOfEndpoint(d.Decode.Endpoint), specOfEndpoint(d.Prefill.Endpoint)) {
				t.Fatalf("pair %+v, want a compatible prefill pod; notes %q", d, d.Notes)
			}
		})
	}
}
