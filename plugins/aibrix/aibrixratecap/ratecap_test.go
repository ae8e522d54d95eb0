package aibrixratecap

import (
	"context"
	"strings"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestAdmitWindow(t *testing.T) {
	now := time.Unix(100, 0)
	p := New("r", Params{}, func() time.Time { return now })
	tests := []struct {
		advance time.Duration
		want    bool
	}{
		{0, true}, {0, true}, {0, false}, // cap 2 within one second
		{999 * time.Millisecond, false}, // still inside the window
		{time.Millisecond, true},        // the first two are exactly 1 s old: out of the window
		{0, true}, {0, false},
	}
	for i, tt := range tests {
		now = now.Add(tt.advance)
		if got := p.Admit("m", 2); got != tt.want {
			t.Fatalf("step %d: admit=%v want %v", i, got, tt.want)
		}
	}
	if !p.Admit("other", 2) {
		t.Fatal("caps are per model")
	}
}

func endpoint(cfg string) fwksched.Endpoint {
	labels := map[string]string{}
	if cfg != "" {
		labels[protocol.AnnotationLabelPrefix+podmodel.AnnotationConfig] = cfg
	}
	return eptest.Scheduling(eptest.Spec{Namespace: "ns", Name: "p", PodName: "p", Labels: labels})
}

func TestAdmitRequest(t *testing.T) {
	cfg := `{"profiles":{"default":{"requestsPerSecond":1},"fast":{"requestsPerSecond":3},"open":{}}}`
	now := time.Unix(100, 0)
	tests := []struct {
		name     string
		cfg      string
		profile  string
		def      int
		admitted int
	}{
		{"default profile cap 1", cfg, "", 0, 1},
		{"named profile cap 3", cfg, "fast", 0, 3},
		{"profile without cap, no default", cfg, "open", 0, 5},
		{"profile without cap, default 2", cfg, "open", 2, 2},
		{"no config, default 4", "", "", 4, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := New("r", Params{DefaultRequestsPerSecond: tt.def}, func() time.Time { return now })
			eps := []fwksched.Endpoint{endpoint(tt.cfg)}
			admitted := 0
			for i := 0; i < 5; i++ {
				req := &fwksched.LLMRequest{TargetModel: "m", Headers: map[string]string{protocol.HeaderConfigProfile: tt.profile}}
				err := p.AdmitRequest(context.Background(), req, eps)
				if err == nil {
					admitted++
					continue
				}
				a, ok := contract.AnswerOf(err)
				if !ok || a.Status != 429 || a.Cause != contract.CauseRateLimited || !strings.Contains(string(a.Body), "rate limit of") ||
					len(a.Headers) != 2 || a.Headers[1] != (contract.Header{Name: "retry-after", Value: "1"}) {
					t.Fatalf("answer %+v", a)
				}
			}
			if admitted != tt.admitted {
				t.Fatalf("admitted %d want %d", admitted, tt.admitted)
			}
		})
	}
}

func TestFactory(t *testing.T) {
	for _, raw := range []string{`{"defaultRequestsPerSecond":-1}`, `{"x":1}`, `[`} {
		if _, err := Factory("r", []byte(raw), nil); err == nil || !strings.Contains(err.Error(), Type) {
			t.Errorf("%s: err %v", raw, err)
		}
	}
	if _, err := Factory("r", nil, nil); err != nil {
		t.Fatal(err)
	}
}
