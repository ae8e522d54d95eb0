package stagesat

import (
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(role string, q int) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: role, Role: role, Labels: map[string]string{}, Metrics: &fwkdl.Metrics{WaitingQueueSize: q}})
}

// mean queue / 10
func measure(eps []fwksched.Endpoint) float64 {
	s := 0.0
	for _, e := range eps {
		s += float64(e.GetMetrics().WaitingQueueSize)
	}
	return s / float64(len(eps)) / 10
}

func TestSaturation(t *testing.T) {
	tests := []struct {
		name     string
		eps      []fwksched.Endpoint
		want     float64
		limiting string
	}{
		{"prefill tier saturated, decode idle", []fwksched.Endpoint{ep("prefill", 12), ep("prefill", 10), ep("decode", 0), ep("decode", 0)}, 1.1, StagePrefill},
		{"decode tier limits", []fwksched.Endpoint{ep("prefill", 1), ep("decode", 5)}, 0.5, StageDecode},
		{"unlabelled pods are decode", []fwksched.Endpoint{ep("", 3), ep("encode-prefill", 1)}, 0.3, StageDecode},
		{"combined-only pool: whole pool", []fwksched.Endpoint{ep("prefill-decode", 4), ep("both", 6)}, 0.5, StageEffective},
		{"encode pods count in neither tier", []fwksched.Endpoint{ep("encode", 50), ep("decode", 2)}, 0.2, StageDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := Saturation(tt.eps, measure)
			if r.Effective < tt.want-1e-9 || r.Effective > tt.want+1e-9 || r.Limiting != tt.limiting {
				t.Fatalf("got %+v, want %v by %s", r, tt.want, tt.limiting)
			}
		})
	}
}

func TestTierOf(t *testing.T) {
	cases := []struct {
		labels map[string]string
		want   Tier
	}{
		{labels: map[string]string{"llm-d.ai/role": "prefill"}, want: TierPrefill},
		{labels: map[string]string{"llm-d.ai/role": "encode-prefill"}, want: TierPrefill},
		{labels: map[string]string{"llm-d.ai/role": "decode"}, want: TierDecode},
		{labels: nil, want: TierDecode}, // no role: a decode target, as GIE's pools are
		{labels: map[string]string{"llm-d.ai/role": "prefill-decode"}, want: TierNeither},
		{labels: map[string]string{"llm-d.ai/role": "encode"}, want: TierNeither},
	}
	for _, tc := range cases {
		if got := TierOf(tc.labels); got != tc.want {
			t.Errorf("TierOf(%v) = %v, want %v", tc.labels, got, tc.want)
		}
	}
}
