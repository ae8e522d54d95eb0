package disaggprofile

import (
	"context"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestCombinedDecodePickSkipsPrefill(t *testing.T) {
	cfg := protocol.AnnotationLabelPrefix + "model.aibrix.ai/config"
	tests := []struct {
		name    string
		labels  map[string]string
		profile string
		skip    bool
	}{
		{"decode", map[string]string{podmodel.LabelLLMDRole: "decode"}, "", false},
		{"no role", nil, "", false},
		{"prefill-decode", map[string]string{podmodel.LabelLLMDRole: "prefill-decode"}, "", true},
		{"both (deprecated alias)", map[string]string{podmodel.LabelLLMDRole: "both"}, "", true},
		{"encode-prefill-decode", map[string]string{podmodel.LabelLLMDRole: "encode-prefill-decode"}, "", true},
		{"aibrix combined profile", map[string]string{"role-name": "all", cfg: `{"defaultProfile":"pd","profiles":{"pd":{"routingConfig":{"combined":true}}}}`}, "", true},
		{"aibrix profile not combined", map[string]string{"role-name": "all", cfg: `{"profiles":{"default":{"routingConfig":{"combined":false}},"c":{"routingConfig":{"combined":true}}}}`}, "", false},
		{"aibrix combined via config-profile header", map[string]string{"role-name": "all", cfg: `{"profiles":{"default":{},"c":{"routingConfig":{"combined":true}}}}`}, "c", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := &fakeDecider{yes: true}
			h := NewHandler("h", defaults(), d, nil)
			r := req()
			if tt.profile != "" {
				r.Headers["Config-Profile"] = tt.profile
			}
			got := h.Pick(context.Background(), fwksched.NewCycleState(), r, eptest.Profiles("decode", "prefill"),
				resultsOf("decode", res(ep("pod", "10.0.0.30", "8000", tt.labels))))
			_, ran := got["prefill"]
			if ran == tt.skip || (d.calls == 1) == tt.skip {
				t.Fatalf("prefill ran=%v decider calls=%d, want skip=%v", ran, d.calls, tt.skip)
			}
		})
	}
}
