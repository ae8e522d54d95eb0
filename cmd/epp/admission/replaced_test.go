package admission

import (
	"context"
	"testing"

	fwkfc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/flowcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/requestcontrol"
)

// TestGateReplaced: GIE's legacy check over the configured detector sheds a sheddable request
// on a saturated pool; with the gate replaced (a forecast plugin decides) it admits it.
func TestGateReplaced(t *testing.T) {
	saturated := poolOf{ep("prefill", 30), ep("decode", 30)}
	tests := []struct {
		name     string
		det      fwkfc.SaturationDetector
		wantShed bool
	}{
		{name: "the configured gate sheds", det: StageAware(queueDetector{}), wantShed: true},
		{name: "the replaced gate does not", det: GateReplaced(StageAware(queueDetector{}))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.det.TypedName().Name != "q" {
				t.Fatal("the detector must keep the configured plugin's name")
			}
			c := WithReasons(requestcontrol.NewLegacyAdmissionController(tc.det, saturated), saturated)
			err := c.Admit(context.Background(), &handlers.RequestContext{Request: &handlers.Request{}, SchedulingRequest: completion("hi")}, -1)
			if shed := err != nil; shed != tc.wantShed {
				t.Fatalf("shed %v (%v), want %v", shed, err, tc.wantShed)
			}
		})
	}
	if GateReplaced(nil) != nil {
		t.Fatal("no detector stays none")
	}
}
