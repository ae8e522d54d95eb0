package contract

import (
	"context"
	"fmt"
	"slices"
	"testing"

	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
)

func TestAnswerTravelsAsErrorAndOnContext(t *testing.T) {
	a := NewAnswer(429, CauseRateLimited, "rate_limit_exceeded", "slow down").WithHeader("retry-after", "1")
	tests := []struct {
		name string
		err  error
		want bool
	}{
		{"bare", a, true},
		{"wrapped", fmt.Errorf("admission: %w", a), true},
		{"plain error", fmt.Errorf("boom"), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := AnswerOf(tt.err)
			if ok != tt.want || (ok && got != a) {
				t.Fatalf("AnswerOf = %v %v", got, ok)
			}
		})
	}
	if Record(context.Background(), a) || Recorded(context.Background()) != nil {
		t.Fatal("a context without a slot records nothing")
	}
	ctx := WithAnswerSlot(context.Background())
	if !Record(ctx, a) || Record(ctx, ConditionalDecodeMiss()) || Recorded(ctx) != a {
		t.Fatal("the first recorded answer must win")
	}
	for _, tt := range []struct {
		name   string
		a      *Answer
		status int
		body   string
		hdrs   []Header
	}{
		{"conditional-decode miss", ConditionalDecodeMiss(), 412,
			`{"error":{"message":"no decode worker has the requested KV cache","type":"invalid_request_error","param":null,"code":412}}`,
			[]Header{{"content-type", "application/json"}}},
		{"model not found", ModelNotFound("m/x"), 404,
			"{\"error\":{\"message\":\"The model `m/x` does not exist.\",\"type\":\"NotFoundError\",\"param\":\"model\",\"code\":404}}",
			[]Header{{"content-type", "application/json"}, {"x-pdgate-error-cause", "model_not_found"}}},
		{"NewAnswer", NewAnswer(503, CauseNoPair, "routing_error", "no pair"), 503,
			`{"error":{"message":"no pair","type":"routing_error","param":null,"code":503}}`,
			[]Header{{"content-type", "application/json"}}},
	} {
		if tt.a.Status != tt.status || string(tt.a.Body) != tt.body || !slices.Equal(tt.a.Headers, tt.hdrs) {
			t.Errorf("%s: %d %s %v", tt.name, tt.a.Status, tt.a.Body, tt.a.Headers)
		}
	}
}

func TestRequestID(t *testing.T) {
	tests := []struct {
		name string
		req  *fwksched.LLMRequest
		resp *fwkrc.Response
		want string
	}{
		{"the request's", &fwksched.LLMRequest{RequestId: "a"}, &fwkrc.Response{RequestId: "b"}, "a"},
		{"the response's when the request has none", &fwksched.LLMRequest{}, &fwkrc.Response{RequestId: "b"}, "b"},
		{"no request", nil, &fwkrc.Response{RequestId: "b"}, "b"},
		{"neither", nil, nil, ""},
	}
	for _, tt := range tests {
		if got := RequestID(tt.req, tt.resp); got != tt.want {
			t.Errorf("%s: %q, want %q", tt.name, got, tt.want)
		}
	}
}
