package pdratioadvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"k8s.io/apimachinery/pkg/types"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

func TestParseParameters(t *testing.T) {
	tests := []struct {
		raw, want string
	}{
		{raw: ``},
		{raw: `{"pool":"llama","ttftMs":500,"tpotMs":30,"band":0.2,"minDwellSeconds":0}`},
		{raw: `{"pool":""}`, want: "pool"},
		{raw: `{"ttftMs":0}`, want: "ttftMs"},
		{raw: `{"tpotMs":-1}`, want: "tpotMs"},
		{raw: `{"windowSeconds":0}`, want: "windowSeconds"},
		{raw: `{"intervalSeconds":0}`, want: "intervalSeconds"},
		{raw: `{"band":1}`, want: "band"},
		{raw: `{"minDwellSeconds":-1}`, want: "minDwellSeconds"},
		{raw: `{"maxPrefillUtilization":1}`, want: "maxPrefillUtilization"},
		{raw: `{"minPrefillUtilization":0.9}`, want: "minPrefillUtilization"},
		{raw: `{"tpotHeadroom":0}`, want: "tpotHeadroom"},
		{raw: `{"maxBatch":0}`, want: "maxBatch"},
		{raw: `{"minReplicas":-1}`, want: "minReplicas"},
		{raw: `{"mixLookbackSeconds":-1}`, want: "mixLookbackSeconds"},
		{raw: `{"kvHeadroom":1.5}`, want: "kvHeadroom"},
		{raw: `{"minSamples":0}`, want: "minSamples"},
		{raw: `{"unknown":1}`, want: "unknown"},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			_, err := ParseParameters("adv", json.RawMessage(tc.raw))
			plugintest.WantErr(t, err, tc.want, Type, "adv")
		})
	}
}

// fleet is a P/D pool of endpoints labelled with llm-d's role.
func fleet(prefill, decode int) []fwksched.Endpoint {
	var out []fwksched.Endpoint
	add := func(role string, n int) {
		for i := range n {
			md := &fwkdl.EndpointMetadata{NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("%s-%d", role, i)},
				Labels: map[string]string{podmodel.LabelLLMDRole: role}}
			m := fwkdl.NewMetrics()
			m.KvCacheMaxTokenCapacity = 1 << 20
			out = append(out, fwksched.NewEndpoint(md, m, nil))
		}
	}
	add("prefill", prefill)
	add("decode", decode)
	return out
}

// drive replays a steady load on two prefill and two decode pods on a virtual clock: every
// 0.1 s a request of 1000 prompt tokens (prefill 0.1 s, then 50 output tokens at 20 ms),
// pods taken in turn, and refused more such requests that admission refuses for want of
// capacity; the pool as admission sees it is pool. It returns the plugin after the estimate
// at the end.
func drive(t *testing.T, p Parameters, pool []fwksched.Endpoint, seconds float64, release bool, refused int) *Plugin {
	t.Helper()
	return driveWith(t, New("adv", p), pool, seconds, release, refused)
}

func driveWith(t *testing.T, a *Plugin, pool []fwksched.Endpoint, seconds float64, release bool, refused int) *Plugin {
	t.Helper()
	now := time.Unix(1000, 0)
	a.UseClock(func() time.Time { return now })
	serving := fleet(2, 2)
	prompt := strings.Repeat("abcd", 1000)
	type ev struct {
		at time.Time
		f  func()
	}
	var evs []ev
	ctx := context.Background()
	n := int(seconds * 10)
	for i := range n {
		start := now.Add(time.Duration(i) * 100 * time.Millisecond)
		req := &fwksched.LLMRequest{RequestId: fmt.Sprintf("r%d", i),
			Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}
		res := &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
			"decode":  {TargetEndpoints: []fwksched.Endpoint{serving[2+i%2]}},
			"prefill": {TargetEndpoints: []fwksched.Endpoint{serving[i%2]}},
		}}
		evs = append(evs, ev{start, func() {
			if err := a.AdmitRequest(ctx, req, pool); err != nil {
				t.Fatal(err)
			}
			a.PreRequest(ctx, req, res)
			for j := range refused {
				a.RefusedForCapacity(ctx, &fwksched.LLMRequest{RequestId: fmt.Sprintf("x%d-%d", i, j), Body: req.Body})
			}
		}})
		if release {
			evs = append(evs, ev{start.Add(90 * time.Millisecond), func() { a.ReleasePrefillActive(req.RequestId) }})
		}
		evs = append(evs, ev{start.Add(100 * time.Millisecond), func() {
			a.ResponseHeader(ctx, req, &fwkrc.Response{RequestId: req.RequestId}, nil)
		}})
		evs = append(evs, ev{start.Add(100*time.Millisecond + 49*20*time.Millisecond), func() {
			a.ResponseBody(ctx, req, &fwkrc.Response{RequestId: req.RequestId, EndOfStream: true,
				Usage: fwkrc.Usage{PromptTokens: 1000, CompletionTokens: 50}}, nil)
		}})
	}
	// events in time order (stable: equal times keep their order)
	for i := 1; i < len(evs); i++ {
		for j := i; j > 0 && evs[j].at.Before(evs[j-1].at); j-- {
			evs[j], evs[j-1] = evs[j-1], evs[j]
		}
	}
	end := time.Unix(1000, 0).Add(time.Duration(seconds * float64(time.Second)))
	for _, e := range evs {
		if e.at.After(end) {
			break
		}
		now = e.at
		e.f()
	}
	now = end
	a.Sweep()
	return a
}

func TestAdvice(t *testing.T) {
	p := DefaultParameters()
	tests := []struct {
		name    string
		pool    []fwksched.Endpoint
		seconds float64
		release bool
		refused int    // requests refused for capacity per request served
		want    string // role=replicas/reason, sorted by role
	}{
		{name: "too few requests: the current size, no_data", pool: fleet(2, 2), seconds: 1.5,
			want: "decode=2/no_data prefill=2/no_data"},
		// prefill: 10,000 tok/s demand, 10,000 tok/s per busy pod, at 0.8 → 2 pods; decode: 500
		// tok/s, batch ≈ 5 at 20 ms (proportional fit), sized for batch 10 at 40 ms → 2 pods
		{name: "steady", pool: fleet(2, 2), seconds: 60, want: "decode=2/steady prefill=2/steady"},
		{name: "a pool smaller than the demand", pool: fleet(1, 1), seconds: 60,
			want: "decode=2/decode_bound prefill=2/prefill_bound"},
		{name: "a pool larger than the demand", pool: fleet(5, 6), seconds: 60,
			want: "decode=2/overprovisioned prefill=2/overprovisioned"},
		// the release callback ends busy time at 90 ms: 11,111 tok/s per pod → 1.125 → still 2
		{name: "prefill-release callback", pool: fleet(2, 2), seconds: 60, release: true,
			want: "decode=2/steady prefill=2/steady"},
		// as many requests refused as served: 20,000 prompt tok/s → 2.5 → 3 prefill pods;
		// 1,000 output tok/s at 250 per pod → 4 decode pods. Sized on the served half alone it
		// would read steady.
		{name: "demand refused for capacity is demand", pool: fleet(2, 2), seconds: 60, refused: 1,
			want: "decode=4/decode_bound prefill=3/prefill_bound"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a := drive(t, p, tc.pool, tc.seconds, tc.release, tc.refused)
			var got []string
			for _, adv := range a.ReplicaAdvice() {
				if adv.Pool != p.Pool {
					t.Errorf("pool %q, want %q", adv.Pool, p.Pool)
				}
				got = append(got, fmt.Sprintf("%s=%d/%s", adv.Role, adv.Replicas, adv.Reason))
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Fatalf("advice %s, want %s", s, tc.want)
			}
		})
	}
}

// TestGauges: the advice is exported per pool and role, one reason at 1.
func TestGauges(t *testing.T) {
	reg := prometheus.NewRegistry()
	p := DefaultParameters()
	p.Pool = "llama"
	a := drive(t, p, fleet(1, 1), 60, false, 0)
	if err := a.metrics.register(reg); err != nil {
		t.Fatal(err)
	}
	a.Sweep()
	if got := testutil.ToFloat64(a.metrics.desired.WithLabelValues("llama", RolePrefill)); got != 2 {
		t.Errorf("desired prefill replicas %v, want 2", got)
	}
	for _, r := range Reasons {
		want := 0.0
		if r == ReasonDecodeBound {
			want = 1
		}
		if got := testutil.ToFloat64(a.metrics.reason.WithLabelValues("llama", RoleDecode, r)); got != want {
			t.Errorf("reason{role=decode,reason=%s} = %v, want %v", r, got, want)
		}
	}
}

// TestNoFlapUnderSteadyLoad: ten minutes of one load measured with noise that straddles a
// replica boundary: the advice may settle once, then never turns back.
func TestNoFlapUnderSteadyLoad(t *testing.T) {
	a := New("adv", DefaultParameters())
	var now time.Time
	a.UseClock(func() time.Time { return now })
	base := time.Unix(0, 0)
	last, dir, turns := map[string]int{}, map[string]int{}, map[string]int{}
	for s := 60; s <= 600; s += 10 {
		now = base.Add(time.Duration(s) * time.Second)
		a.current = map[string]int{RolePrefill: 2, RoleDecode: 2}
		// ±15 % noise on the prefill throughput, ±15 % on the step
		noise := []float64{1, 1.15, 0.85, 1.1, 0.9}[s/10%5]
		obs := Observation{Requests: 500, PromptRate: 9000, PrefillRate: 10000 * noise, MeanPrompt: 1000, MeanOutput: 50,
			OutputRate: 500, Step: StepFit{PerSeq: 0.004 * (2 - noise)}, MaxBatch: 5}
		for _, adv := range a.advise(now, obs) {
			if prev, ok := last[adv.Role]; ok && adv.Replicas != prev {
				d := 1
				if adv.Replicas < prev {
					d = -1
				}
				if d != dir[adv.Role] {
					turns[adv.Role]++
					dir[adv.Role] = d
				}
			}
			last[adv.Role] = adv.Replicas
		}
	}
	for role, n := range turns {
		if n > 1 {
			t.Errorf("role %s changed direction %d times over ten minutes of one load, want at most one move", role, n)
		}
	}
}

func TestFactory(t *testing.T) {
	pl, err := Factory("adv", json.RawMessage(`{"pool":"llama"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if tn := pl.TypedName(); tn.Type != Type || tn.Name != "adv" {
		t.Fatalf("typed name %v", tn)
	}
	if _, err := Factory("adv", json.RawMessage(`{"band":2}`), nil); err == nil {
		t.Fatal("Factory accepted band=2")
	}
}
