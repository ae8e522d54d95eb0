package pdratioadvisor

import (
	"fmt"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// keepsDecodeOnly is a decider that keeps every request on its decode pod.
type keepsDecodeOnly struct{}

func (keepsDecodeOnly) DecodeOnlyAtAdmission(*fwksched.LLMRequest) bool { return true }

// TestRefusedPromptsFollowTheDeciders: a refused request's prompt is prefill demand unless the
// deciders keep it on its decode pod; either way it arrives, and its output is decode demand.
func TestRefusedPromptsFollowTheDeciders(t *testing.T) {
	for _, tc := range []struct {
		name   string
		stages []contract.StageClassifier
		want   string
	}{
		{name: "a P/D decider may send it to prefill", want: "decode=4/decode_bound prefill=3/prefill_bound"},
		{name: "kept decode-only", stages: []contract.StageClassifier{keepsDecodeOnly{}}, want: "decode=4/decode_bound prefill=2/steady"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New("adv", DefaultParameters())
			a.stages = tc.stages
			a = driveWith(t, a, fleet(2, 2), 60, false, 1)
			var got []string
			for _, adv := range a.ReplicaAdvice() {
				got = append(got, fmt.Sprintf("%s=%d/%s", adv.Role, adv.Replicas, adv.Reason))
			}
			if s := strings.Join(got, " "); s != tc.want {
				t.Fatalf("advice %s, want %s", s, tc.want)
			}
		})
	}
}
