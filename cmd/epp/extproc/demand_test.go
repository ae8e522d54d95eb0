package extproc

import (
	"context"
	"net/http"
	"testing"
	"time"

	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// refuser is an admission plugin answering every request with err (nil admits).
type refuser struct{ err error }

func (r refuser) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "refuser", Name: "r"}
}
func (r refuser) AdmitRequest(context.Context, *fwksched.LLMRequest, []fwksched.Endpoint) error {
	return r.err
}

// demandSeer counts the refused requests it is told of.
type demandSeer struct{ ids []string }

func (d *demandSeer) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "demand-seer", Name: "d"}
}
func (d *demandSeer) RefusedForCapacity(_ context.Context, req *fwksched.LLMRequest) {
	d.ids = append(d.ids, req.RequestId)
}

// gate is an admission controller answering with err.
type gate struct{ err error }

func (g gate) Admit(context.Context, *handlers.RequestContext, int) error { return g.err }

// TestDemandObserversSeeCapacityRefusals: a request refused for want of capacity, by an
// admission plugin or by the admission controller, reaches the demand observers, which see no
// other hook for it; one refused for another reason, or admitted, does not.
func TestDemandObserversSeeCapacityRefusals(t *testing.T) {
	saturated := contract.NewAnswer(http.StatusTooManyRequests, "forecast_slo_miss", "", "no placement")
	for _, tc := range []struct {
		name     string
		gate     error
		plugin   error
		observed bool
	}{
		{name: "admitted"},
		{name: "an admission plugin's 429", plugin: saturated, observed: true},
		{name: "an admission plugin's 503", plugin: contract.NewAnswer(http.StatusServiceUnavailable, "no_capacity", "", "nothing decodes"),
			observed: true},
		{name: "the saturation gate sheds", gate: errcommon.Error{Code: errcommon.ResourceExhausted, Msg: "saturated"}, observed: true},
		{name: "an unknown model", gate: contract.ModelNotFound("m")},
		{name: "an admission plugin's 400", plugin: contract.NewAnswer(http.StatusBadRequest, "bad", "", "malformed")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			seen := &demandSeer{}
			srv := New(Config{Datastore: fakeDS{}, Scheduler: &fakeScheduler{}, Admission: gate{tc.gate},
				Candidates: fakeCandidates{}, Plugins: []fwkplugin.Plugin{refuser{tc.plugin}, seen}}, Options{})
			req := &fwksched.LLMRequest{RequestId: "r", TargetModel: "m", Headers: map[string]string{}}
			_, err := srv.Director().Decide(context.Background(), NewRequest(req, "m", time.Now()))
			if (err != nil) != (tc.gate != nil || tc.plugin != nil) {
				t.Fatalf("decided with %v", err)
			}
			if got := len(seen.ids) == 1 && seen.ids[0] == "r"; got != tc.observed || len(seen.ids) > 1 {
				t.Fatalf("observers told of %v, want the request: %v", seen.ids, tc.observed)
			}
		})
	}
}
