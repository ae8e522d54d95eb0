package contract

import (
	"context"
	"fmt"
	"testing"
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
	if m := ConditionalDecodeMiss(); m.Status != 412 || string(m.Body) != "inference error: PreconditionFailed - no decode worker has the requested KV cache" {
		t.Fatalf("412 answer %+v", m)
	}
}
