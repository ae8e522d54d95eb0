package probabilisticadmitter

import (
	"context"
	"encoding/json"
	"math"
	"net/http"
	"strings"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(role string, q int, kv float64) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: role, Role: role, Metrics: &fwkdl.Metrics{WaitingQueueSize: q, KVCacheUsagePercent: kv}})
}

func TestAdmitRequest(t *testing.T) {
	prefillHot := []fwksched.Endpoint{ep("prefill", 5, 0), ep("prefill", 5, 0), ep("decode", 0, 0), ep("decode", 0, 0)}
	idle := []fwksched.Endpoint{ep("prefill", 0, 0), ep("decode", 0, 0.1)}
	tests := []struct {
		name     string
		priority int
		eps      []fwksched.Endpoint
		random   float64
		want     int // 0 = admitted
	}{
		{"non-sheddable is always admitted", 0, prefillHot, 0, 0},
		{"sheddable on a saturated prefill tier is shed", -1, prefillHot, 0.99, http.StatusTooManyRequests},
		{"sheddable on an idle pool is admitted", -1, idle, 0.5, 0},
		{"no candidates: admitted", -1, nil, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := New("a", DefaultParameters(), func() float64 { return tt.random })
			err := a.AdmitRequest(context.Background(), &fwksched.LLMRequest{Objectives: fwksched.RequestObjectives{Priority: tt.priority}}, tt.eps)
			plugintest.WantAnswer(t, err, tt.want, contract.Header{Name: DroppedReasonHeader, Value: ReasonSaturated})
		})
	}
}

// A fleet-wide mean would average the hot prefill tier with the idle decode tier (0.5,
// p = 0.5^5 × 300 ≈ 9.4 → 1) — here both shed; the difference shows with a milder overload:
// prefill at 0.4 and decode at 0 average to 0.2 (p ≈ 0.096) but the prefill tier alone gives
// 0.4 (p ≈ 3.07 → 1).
func TestStageAwareVersusFleetWide(t *testing.T) {
	a := New("a", DefaultParameters(), nil)
	eps := []fwksched.Endpoint{ep("prefill", 2, 0), ep("decode", 0, 0)}
	sat := a.Saturation(eps)
	if math.Abs(sat.Effective-0.4) > 1e-9 || sat.Limiting != "prefill" {
		t.Fatalf("stage-aware saturation %+v, want 0.4 by prefill", sat)
	}
	if p := a.Probability(sat.Effective); p != 1 {
		t.Fatalf("probability %v, want 1", p)
	}
	if p := a.Probability(a.meanSaturation(eps)); p > 0.1 {
		t.Fatalf("fleet-wide probability %v, want < 0.1", p)
	}
}

func TestParameters(t *testing.T) {
	for raw, want := range map[string]string{
		`{"queueDepthThreshold":0}`:   "queueDepthThreshold",
		`{"kvCacheUtilThreshold":-1}`: "kvCacheUtilThreshold",
		`{"power":0}`:                 "power",
		`{"k":0}`:                     "parameter k",
		`{"queueDepthThreshhold":3}`:  "queueDepthThreshhold",
	} {
		if _, err := ParseParameters("a", json.RawMessage(raw)); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err %v, want one naming %s", raw, err, want)
		}
	}
	p, err := ParseParameters("a", json.RawMessage(`{"queueDepthThreshold":999999999,"kvCacheUtilThreshold":1.0}`))
	if err != nil || p.Power != 5 || p.K != 300 {
		t.Fatalf("defaults not kept: %+v %v", p, err)
	}
}
