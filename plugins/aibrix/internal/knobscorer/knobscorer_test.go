package knobscorer

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/pdknobs"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// refuseLeastRequest stands for a scorer that cannot run least_request.
func refuseLeastRequest(k pdknobs.Knobs) string {
	if k.DecodeScorePolicy == pdknobs.DecodeLeastRequest {
		return "decodeScorePolicy least_request"
	}
	return ""
}

func TestLoad(t *testing.T) {
	tests := []struct {
		name, raw, wantErr string
	}{
		{name: "accepted", raw: `{"decodeScorePolicy": "load_balancing"}`},
		{name: "refused policy", raw: `{"decodeScorePolicy": "least_request"}`,
			wantErr: `aibrix-decode-scorer "d": decodeScorePolicy least_request charges the ledger with the pick; use aibrix-pd-pair`},
		{name: "bad knobs", raw: `{"decodeScorePolicy": 3}`, wantErr: `aibrix-decode-scorer "d"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := Load(nil, "aibrix-decode-scorer", "d", []byte(tt.raw), refuseLeastRequest)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if b.TypedName().String() != "d/aibrix-decode-scorer" || b.KnobsFor(nil, nil).DecodeScorePolicy != pdknobs.DecodeLoadBalancing {
				t.Fatalf("name %v knobs %+v", b.TypedName(), b.KnobsFor(nil, nil))
			}
		})
	}
}

// A request's config-profile header picks the model's profile over the instance's knobs; no
// header, or no request, keeps them.
func TestKnobsFor(t *testing.T) {
	b, err := Load(nil, "aibrix-decode-scorer", "d", []byte(`{"decodeScorePolicy": "load_balancing"}`), refuseLeastRequest)
	if err != nil {
		t.Fatal(err)
	}
	cfg := &podmodel.ModelConfig{Profiles: map[string]podmodel.Profile{
		"lr": {RoutingConfig: podmodel.RoutingConfig{DecodeScorePolicy: pdknobs.DecodeLeastRequest}},
	}}
	tests := []struct {
		name string
		req  *fwksched.LLMRequest
		want string
	}{
		{name: "no request", want: pdknobs.DecodeLoadBalancing},
		{name: "no header", req: &fwksched.LLMRequest{Headers: map[string]string{}}, want: pdknobs.DecodeLoadBalancing},
		{name: "profile header", req: &fwksched.LLMRequest{Headers: map[string]string{protocol.HeaderConfigProfile: "lr"}}, want: pdknobs.DecodeLeastRequest},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := b.KnobsFor(tt.req, cfg).DecodeScorePolicy; got != tt.want {
				t.Fatalf("decode policy %s, want %s", got, tt.want)
			}
		})
	}
}
