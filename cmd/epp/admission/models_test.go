package admission

import (
	"context"
	"errors"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

type listCandidates []fwkdl.Endpoint

func (l listCandidates) Locate(context.Context, map[string]any) []fwkdl.Endpoint { return l }

// served is an endpoint declaring models through the mirrored pdgate.io/served-models annotation.
func served(models string, m *fwkdl.Metrics) fwkdl.Endpoint {
	return eptest.Data(eptest.Spec{Name: "p-" + models, Role: "decode", Metrics: m,
		Labels: map[string]string{protocol.AnnotationLabelPrefix + "pdgate.io/served-models": models}})
}

func undeclared() fwkdl.Endpoint { return eptest.Data(eptest.Spec{Name: "u", Role: "prefill"}) }

func TestModelNotFound(t *testing.T) {
	admitted := errors.New("admission ran")
	tests := []struct {
		name            string
		pool            listCandidates
		incoming, model string
		want404         bool
	}{
		{"every endpoint declares, none serves: 404", listCandidates{served("a,b", nil), served("c", nil)}, "x", "", true},
		{"one endpoint serves", listCandidates{served("a,b", nil), served("x", nil)}, "x", "", false},
		{"an undeclared endpoint may serve it", listCandidates{served("a", nil), undeclared()}, "x", "", false},
		{"nothing declared", listCandidates{undeclared()}, "x", "", false},
		{"empty pool: admission decides (503)", nil, "x", "", false},
		{"a loaded LoRA adapter is served", listCandidates{served("base", &fwkdl.Metrics{ActiveModels: map[string]int{"x": 1}})}, "x", "", false},
		{"a waiting LoRA adapter is served", listCandidates{served("base", &fwkdl.Metrics{WaitingModels: map[string]int{"x": 1}})}, "x", "", false},
		{"the rewrite target is checked", listCandidates{served("y", nil)}, "x", "y", false},
		{"a rewrite to an unserved target: 404 names it", listCandidates{served("x", nil)}, "x", "z", true},
		{"no model in the body", listCandidates{served("a", nil)}, "", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := WithReasons(fixedAdmission{admitted}, tt.pool)
			err := c.Admit(context.Background(), &handlers.RequestContext{IncomingModelName: tt.incoming, TargetModelName: tt.model}, 0)
			a, ok := contract.AnswerOf(err)
			if !tt.want404 {
				if ok || !errors.Is(err, admitted) {
					t.Fatalf("got %v, want admission to run", err)
				}
				return
			}
			want := tt.model
			if want == "" {
				want = tt.incoming
			}
			if !ok || a.Status != 404 || a.Cause != contract.CauseModelNotFound || string(a.Body) != string(protocol.ModelNotFoundBody(want)) {
				t.Fatalf("got %v, want the 404 model answer for %q", err, want)
			}
		})
	}
}
