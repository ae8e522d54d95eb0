package handoffcompatfilter

import (
	"context"
	"net/http"
	"slices"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(name string, labels map[string]string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: name, Labels: labels, NoMetrics: true})
}

func names(eps []fwksched.Endpoint) []string {
	out := []string{}
	for _, e := range eps {
		out = append(out, e.GetMetadata().NamespacedName.Name)
	}
	return out
}

func TestFilter(t *testing.T) {
	nixl := map[string]string{handoffcompat.LabelConnector: "nixl"}
	revA := map[string]string{handoffcompat.LabelRevision: "a"}
	revB := map[string]string{handoffcompat.LabelRevision: "b"}
	candidates := []fwksched.Endpoint{
		ep("nixl", nixl), ep("NIXL", map[string]string{handoffcompat.LabelConnector: "NIXL"}),
		ep("mooncake", map[string]string{handoffcompat.LabelConnector: "mooncake"}), ep("plain", nil),
	}
	revAOnly := []fwksched.Endpoint{ep("a1", revA), ep("a2", revA)}
	tests := []struct {
		name       string
		fallback   handoffcompat.Fallback
		peerStage  string // "decode", "prefill" or "" (no peer)
		peer       map[string]string
		eps        []fwksched.Endpoint
		want       []string
		wantStatus int
		wantSkip   bool
		counted    handoffcompat.Attr // with count: the reason counted
		count      bool
	}{
		{name: "first stage of a cycle", peerStage: "", eps: candidates, want: names(candidates)},
		{name: "peer declares nothing", peerStage: "decode", peer: nil, eps: candidates, want: names(candidates)},
		{name: "same connector, any case, or none declared", peerStage: "decode", peer: nixl, eps: candidates, want: []string{"nixl", "NIXL", "plain"}},
		{name: "prefill first filters the decode candidates", peerStage: "prefill", peer: revA, eps: append(slices.Clone(revAOnly), ep("b1", revB)), want: []string{"a1", "a2"}},
		{name: "decode first, none compatible: local prefill", fallback: handoffcompat.LocalPrefill, peerStage: "decode", peer: revB, eps: revAOnly,
			want: []string{}, count: true, counted: handoffcompat.Revision},
		{name: "decode first, none compatible: error", fallback: handoffcompat.Fail, peerStage: "decode", peer: revB, eps: revAOnly,
			want: []string{}, wantStatus: http.StatusServiceUnavailable, count: true, counted: handoffcompat.Revision},
		{name: "prefill first, none compatible: local prefill keeps decode and skips prefill", fallback: handoffcompat.LocalPrefill, peerStage: "prefill", peer: revB, eps: revAOnly,
			want: []string{"a1", "a2"}, wantSkip: true, count: true, counted: handoffcompat.Revision},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			reg := prometheus.NewRegistry()
			f := New("f", tc.fallback)
			c, err := handoffcompat.NewCounter(reg)
			if err != nil {
				t.Fatal(err)
			}
			f.counter = c
			cs := fwksched.NewCycleState()
			pick := &contract.StageResult{Endpoints: []fwksched.Endpoint{ep("peer", tc.peer)}}
			switch tc.peerStage {
			case "decode":
				cs.Write(contract.DecodeResultKey, pick)
			case "prefill":
				cs.Write(contract.PrefillResultKey, pick)
			}
			ctx := contract.WithAnswerSlot(context.Background())
			got := names(f.Filter(ctx, cs, nil, tc.eps))
			if !slices.Equal(got, tc.want) {
				t.Errorf("kept %v, want %v", got, tc.want)
			}
			a := contract.Recorded(ctx)
			if (a != nil) != (tc.wantStatus != 0) || (a != nil && (a.Status != tc.wantStatus || a.Cause != handoffcompat.CauseNoCompatible)) {
				t.Errorf("answer = %v, want status %d", a, tc.wantStatus)
			}
			if _, skip := contract.ReadSkip(cs, contract.SkipPrefillKey); skip != tc.wantSkip {
				t.Errorf("prefill skip marker = %v, want %v", skip, tc.wantSkip)
			}
			if n := testutil.CollectAndCount(reg); (n > 0) != tc.count {
				t.Fatalf("%d series counted, want %v", n, tc.count)
			}
			if v := c.Count(tc.counted, tc.fallback); tc.count && v != 1 {
				t.Errorf("%s counted %g times, want 1", tc.counted, v)
			}
		})
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]handoffcompat.Fallback{``: handoffcompat.LocalPrefill, `{}`: handoffcompat.LocalPrefill,
		`{"noCompatiblePrefill":"error"}`: handoffcompat.Fail} {
		if got, err := ParseParameters("f", []byte(raw)); err != nil || got != want {
			t.Errorf("%s: %q, %v", raw, got, err)
		}
	}
	for _, raw := range []string{`{"noCompatiblePrefill":"drop"}`, `{"unknown":1}`} {
		if _, err := ParseParameters("f", []byte(raw)); err == nil {
			t.Errorf("%s: accepted", raw)
		}
	}
}

func TestKeepsTheSliceWhenEveryCandidateIsCompatible(t *testing.T) {
	eps := []fwksched.Endpoint{ep("a", nil), ep("b", map[string]string{handoffcompat.LabelTPSize: "4"})}
	cs := fwksched.NewCycleState()
	cs.Write(contract.DecodeResultKey, &contract.StageResult{Endpoints: []fwksched.Endpoint{ep("peer", map[string]string{handoffcompat.LabelTPSize: "04"})}})
	f := New("f", "")
	if n := testing.AllocsPerRun(100, func() { _ = f.Filter(context.Background(), cs, nil, eps) }); n != 0 {
		t.Errorf("Filter allocates %g times when it keeps every candidate", n)
	}
}
