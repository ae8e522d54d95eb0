package contract

import (
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

type fixedStage bool

func (f fixedStage) DecodeOnlyAtAdmission(*fwksched.LLMRequest) bool { return bool(f) }

func TestDecodeOnlyAtAdmission(t *testing.T) {
	req := &fwksched.LLMRequest{}
	tests := []struct {
		name        string
		classifiers []StageClassifier
		req         *fwksched.LLMRequest
		want        bool
	}{
		{"no classifiers: a prefill leg may be needed", nil, req, false},
		{"every classifier keeps it decode-only", []StageClassifier{fixedStage(true), fixedStage(true)}, req, true},
		{"one classifier depends on the pick", []StageClassifier{fixedStage(true), fixedStage(false)}, req, false},
		{"no request", []StageClassifier{fixedStage(true)}, nil, false},
	}
	for _, tc := range tests {
		if got := DecodeOnlyAtAdmission(tc.classifiers, tc.req); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}
