package sessionaffinityscorer

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/go-logr/logr"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/picker"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/scheduling/scorer/queuedepth"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/plugins/deciders/alwaysdisagg"
	"github.com/pdgate/pdgate/plugins/filters/rolefilter"
	"github.com/pdgate/pdgate/plugins/profile/disaggprofile"
	sa "github.com/pdgate/pdgate/plugins/sessionaffinity/internal/sessionaffinity"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// TestPDSessionThroughGIEScheduler runs the scorer inside GIE v1.5.0's scheduler with
// disagg-profile-handler (always disaggregate), the role filters, GIE's queue-scorer (weight 1)
// and max-score-picker, the affinity weighted 4 in the decode profile only: the session is bound
// to the decode pick (never the prefill pick), wins while its pod is present and within the
// allowance, and moves cleanly when the pod leaves the pool or is overloaded.
func TestPDSessionThroughGIEScheduler(t *testing.T) {
	c, err := ParseParameters("decode-session-affinity", json.RawMessage(`{"strategy":"session_id","loadAllowance":4,
		"sessionIdConfig":{"sources":[{"header":"x-session-id"},{"header":"x-aibrix-session-key"}]}}`))
	if err != nil {
		t.Fatal(err)
	}
	m, _ := sa.NewMetrics(nil)
	t0 := time.Unix(1_000_000, 0)
	aff := New("decode-session-affinity", c, m, func() time.Time { return t0 })
	hp, err := disaggprofile.ParseParameters("disagg", json.RawMessage(`{}`), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	decider, _ := alwaysdisagg.PDFactory("always", nil, nil)
	handler := disaggprofile.NewHandler("disagg", hp, decider.(*alwaysdisagg.PDDecider), nil)
	df, _ := rolefilter.New(rolefilter.DecodeType, "decode-filter")
	pf, _ := rolefilter.New(rolefilter.PrefillType, "prefill-filter")
	queue := queuedepth.NewQueueScorer()
	sched := scheduling.NewSchedulerWithConfig(scheduling.NewSchedulerConfig(handler, map[string]fwksched.SchedulerProfile{
		"decode": scheduling.NewSchedulerProfile().WithFilters(df).
			WithScorers(scheduling.NewWeightedScorer(queue, 1), scheduling.NewWeightedScorer(aff, 4)).WithPicker(picker.NewMaxScorePicker(1)),
		"prefill": scheduling.NewSchedulerProfile().WithFilters(pf).
			WithScorers(scheduling.NewWeightedScorer(queue, 1)).WithPicker(picker.NewMaxScorePicker(1)),
	}))

	pods := func(decode map[string]int) []fwksched.Endpoint {
		eps := []fwksched.Endpoint{
			eptest.Scheduling(eptest.Spec{Name: "p1", Namespace: "ns", Role: "prefill", Metrics: &fwkdl.Metrics{WaitingQueueSize: 0}}),
			eptest.Scheduling(eptest.Spec{Name: "p2", Namespace: "ns", Role: "prefill", Metrics: &fwkdl.Metrics{WaitingQueueSize: 3}}),
		}
		for _, n := range []string{"d1", "d2", "d3"} {
			if q, ok := decode[n]; ok {
				eps = append(eps, eptest.Scheduling(eptest.Spec{Name: n, Namespace: "ns", Role: "decode", Metrics: &fwkdl.Metrics{WaitingQueueSize: q}}))
			}
		}
		return eps
	}
	steps := []struct {
		name        string
		header      string // the session header used
		decode      map[string]int
		wantDecode  string
		wantPrefill string
		wantBound   string
	}{
		{"new session: bound to the decode pick", "x-session-id", map[string]int{"d1": 2, "d2": 0, "d3": 1}, "ns/d2", "ns/p1", "ns/d2"},
		{"affinity beats a less loaded pod", "x-session-id", map[string]int{"d1": 0, "d2": 2, "d3": 1}, "ns/d2", "ns/p1", "ns/d2"},
		{"AIBrix's key names the same session", "x-aibrix-session-key", map[string]int{"d1": 0, "d2": 3, "d3": 1}, "ns/d2", "ns/p1", "ns/d2"},
		{"bound pod left the pool: queue decides, new pick bound", "x-session-id", map[string]int{"d1": 1, "d3": 0}, "ns/d3", "ns/p1", "ns/d3"},
		{"old pod back: the session stays on the new one", "x-session-id", map[string]int{"d1": 1, "d2": 0, "d3": 1}, "ns/d3", "ns/p1", "ns/d3"},
		{"over the allowance: migrates to the idlest", "x-session-id", map[string]int{"d1": 0, "d2": 3, "d3": 9}, "ns/d1", "ns/p1", "ns/d1"},
	}
	ctx := context.Background()
	for i, st := range steps {
		req := &fwksched.LLMRequest{RequestId: st.name, Headers: map[string]string{st.header: "chat-42"}}
		res, err := sched.Schedule(ctx, req, pods(st.decode))
		if err != nil {
			t.Fatalf("step %d (%s): %v", i, st.name, err)
		}
		aff.PreRequest(ctx, req, res)
		gotD := sa.ID(res.ProfileResults[res.PrimaryProfileName].TargetEndpoints[0])
		var gotP string
		if pr := res.ProfileResults["prefill"]; pr != nil && len(pr.TargetEndpoints) > 0 {
			gotP = sa.ID(pr.TargetEndpoints[0])
		}
		bound, _ := aff.Affinity().Table().Get("chat-42", t0)
		if gotD != st.wantDecode || gotP != st.wantPrefill || bound != st.wantBound {
			t.Fatalf("step %d (%s): decode %s prefill %s bound %s; want %s %s %s", i, st.name, gotD, gotP, bound, st.wantDecode, st.wantPrefill, st.wantBound)
		}
	}
}
