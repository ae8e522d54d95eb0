package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/deciders/alwaysdisagg"
	"github.com/pdgate/pdgate/plugins/deciders/prefixdecider"
)

func completion(prompt string) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{TargetModel: "m", Body: &fwksched.LLMRequestBody{
		Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}
}

func TestStagesFromPlugins(t *testing.T) {
	always, _ := alwaysdisagg.PDFactory("a", nil, nil)
	short, long := completion("What is a KV cache?"), completion(strings.Repeat("a long document sentence. ", 200))
	middle := completion(strings.Repeat("a middle sentence. ", 10)) // ~48 tokens: between 16 and 256
	for _, c := range []struct {
		name              string
		plugins           []fwkplugin.Plugin
		wantShort, wantLg bool // decode-only?
		wantMiddle        *bool
	}{
		{"no decider: pool-level rule", nil, false, false, nil},
		{"prefix decider 256", []fwkplugin.Plugin{prefixdecider.New("p", prefixdecider.Parameters{NonCachedTokens: 256})}, true, false, new(true)},
		{"prefix decider disabled: never disaggregates", []fwkplugin.Plugin{prefixdecider.New("p", prefixdecider.Parameters{})}, true, true, nil},
		{"always-disagg present", []fwkplugin.Plugin{prefixdecider.New("p", prefixdecider.Parameters{NonCachedTokens: 256}), always}, false, false, nil},
		{"two thresholds: decode-only under both", []fwkplugin.Plugin{prefixdecider.New("p", prefixdecider.Parameters{NonCachedTokens: 256}),
			prefixdecider.New("q", prefixdecider.Parameters{NonCachedTokens: 16})}, true, false, new(false)},
	} {
		s := StagesFromPlugins(c.plugins)
		if got := s.DecodeOnly(short); got != c.wantShort {
			t.Errorf("%s: short prompt decode-only %v, want %v", c.name, got, c.wantShort)
		}
		if got := s.DecodeOnly(long); got != c.wantLg {
			t.Errorf("%s: long prompt decode-only %v, want %v", c.name, got, c.wantLg)
		}
		if got := s.DecodeOnly(middle); c.wantMiddle != nil && got != *c.wantMiddle {
			t.Errorf("%s: middle prompt decode-only %v, want %v", c.name, got, *c.wantMiddle)
		}
	}
}

// checkAdmission is GIE's legacy rule: shed when the detector says >= 1.
type checkAdmission struct {
	det interface {
		Saturation(context.Context, []fwkdl.Endpoint) float64
	}
	eps []fwkdl.Endpoint
}

func (c checkAdmission) Admit(ctx context.Context, _ *handlers.RequestContext, _ int) error {
	if c.det.Saturation(ctx, c.eps) >= 1 {
		return errors.New("saturated")
	}
	return nil
}

func TestControllerMeasuresTheStagesARequestNeeds(t *testing.T) {
	det := StageAware(queueDetector{})
	stages := StagesFromPlugins([]fwkplugin.Plugin{prefixdecider.New("p", prefixdecider.Parameters{NonCachedTokens: 256})})
	admit := func(eps []fwkdl.Endpoint, req *fwksched.LLMRequest) bool {
		c := WithReasons(checkAdmission{det: det, eps: eps}, nil).WithRequestStages(stages)
		return c.Admit(context.Background(), &handlers.RequestContext{SchedulingRequest: req}, -1) == nil
	}
	short, long := completion("hello"), completion(strings.Repeat("a long document sentence. ", 200))
	prefillHot := []fwkdl.Endpoint{ep("prefill", 12), ep("decode", 0)}
	decodeHot := []fwkdl.Endpoint{ep("prefill", 0), ep("decode", 12)}
	if !admit(prefillHot, short) || admit(prefillHot, long) {
		t.Error("prefill tier saturated: want the decode-only request admitted and the long one shed")
	}
	if admit(decodeHot, short) || admit(decodeHot, long) {
		t.Error("decode tier saturated: both requests need decode, want both shed")
	}
	// Without classification (nil stages), the pool-level rule sheds both.
	c := WithReasons(checkAdmission{det: det, eps: prefillHot}, nil)
	if c.Admit(context.Background(), &handlers.RequestContext{SchedulingRequest: short}, -1) == nil {
		t.Error("pool-level rule admitted a request while the prefill tier is saturated")
	}
}

// countingClassifier counts how often admission asks it.
type countingClassifier struct{ calls int }

func (c *countingClassifier) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "counting", Name: "c"}
}

func (c *countingClassifier) DecodeOnlyAtAdmission(*fwksched.LLMRequest) bool {
	c.calls++
	return false
}

// TestAdmitClassifiesARequestOnce: the reservation and the detector share one classification
// (a classification may estimate the whole prompt).
func TestAdmitClassifiesARequestOnce(t *testing.T) {
	cc := &countingClassifier{}
	det := StageAware(queueDetector{})
	c := WithReasons(checkAdmission{det: det, eps: []fwkdl.Endpoint{ep("prefill", 0), ep("decode", 0)}}, nil).
		WithRequestStages(StagesFromPlugins([]fwkplugin.Plugin{cc})).WithReservations(NewDispatches())
	req := completion("hello")
	req.RequestId = "r1"
	if err := c.Admit(context.Background(), &handlers.RequestContext{SchedulingRequest: req}, -1); err != nil {
		t.Fatal(err)
	}
	if cc.calls != 1 {
		t.Fatalf("classified %d times, want 1", cc.calls)
	}
}
