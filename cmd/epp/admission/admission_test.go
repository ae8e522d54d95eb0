package admission

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"slices"
	"strings"
	"testing"

	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// queueDetector: saturation = mean waiting queue / 10.
type queueDetector struct{}

func (queueDetector) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "q", Name: "q"}
}
func (queueDetector) Saturation(_ context.Context, eps []fwkdl.Endpoint) float64 {
	if len(eps) == 0 {
		return 1
	}
	s := 0.0
	for _, e := range eps {
		s += float64(e.GetMetrics().WaitingQueueSize)
	}
	return s / float64(len(eps)) / 10
}

func ep(role string, q int) fwkdl.Endpoint {
	return eptest.Data(eptest.Spec{Name: role, Role: role, Metrics: &fwkdl.Metrics{WaitingQueueSize: q}})
}

func TestStageAwareDetector(t *testing.T) {
	d := StageAware(queueDetector{})
	// Prefill tier at 1.2, decode tier idle: a fleet-wide mean (0.6) would admit sheddable
	// work the prefill tier cannot take.
	eps := []fwkdl.Endpoint{ep("prefill", 12), ep("prefill", 12), ep("decode", 0), ep("decode", 0)}
	if got := d.Saturation(context.Background(), eps); got < 1.19 || got > 1.21 {
		t.Fatalf("stage-aware saturation %v, want 1.2", got)
	}
	if got := (queueDetector{}).Saturation(context.Background(), eps); got > 0.61 {
		t.Fatalf("fleet-wide %v, want 0.6", got)
	}
	if d.TypedName().Name != "q" {
		t.Fatal("the wrapper must keep the configured plugin's name")
	}
}

type fixedAdmission struct{ err error }

func (f fixedAdmission) Admit(context.Context, *handlers.RequestContext, int) error { return f.err }

type fixedCandidates struct{ n int }

func (f fixedCandidates) Locate(context.Context, map[string]any) []fwkdl.Endpoint {
	return make([]fwkdl.Endpoint, f.n)
}

func TestReasons(t *testing.T) {
	tests := []struct {
		name       string
		err        error
		pool       int
		wantStatus int
		wantReason string
	}{
		{"saturated: shed 429", errcommon.Error{Code: errcommon.ResourceExhausted, Msg: "system saturated, sheddable request dropped"}, 4, http.StatusTooManyRequests, ReasonSaturated},
		{"capacity with an empty pool: 503", errcommon.Error{Code: errcommon.ResourceExhausted, Msg: "x"}, 0, http.StatusServiceUnavailable, ReasonNoEndpoints},
		{"queue TTL with endpoints: 429", errcommon.Error{Code: errcommon.ServiceUnavailable, Msg: "request timed out in queue: ttl"}, 2, http.StatusTooManyRequests, ReasonTTLExpired},
		{"queue TTL with no endpoints: 503", errcommon.Error{Code: errcommon.ServiceUnavailable, Msg: "request timed out in queue: ttl"}, 0, http.StatusServiceUnavailable, ReasonNoEndpoints},
		{"client gone: 503", errcommon.Error{Code: errcommon.ServiceUnavailable, Msg: "client disconnected: x"}, 2, http.StatusServiceUnavailable, ReasonContextCancelled},
		{"flow control stopped: 503", errcommon.Error{Code: errcommon.Internal, Msg: "internal flow control error: flow controller is not running"}, 2, http.StatusServiceUnavailable, ReasonShuttingDown},
		{"anything else flow control could not place: 500", errcommon.Error{Code: errcommon.Internal, Msg: "internal flow control error: x"}, 2, http.StatusInternalServerError, ReasonInternal},
		{"an error that is not GIE's stays as it is", errors.New("x"), 2, 0, ""},
		{"admitted", nil, 2, 0, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := WithReasons(fixedAdmission{tt.err}, fixedCandidates{tt.pool})
			err := c.Admit(context.Background(), &handlers.RequestContext{}, -1)
			a, ok := contract.AnswerOf(err)
			if tt.wantStatus == 0 {
				if ok {
					t.Fatalf("unexpected answer %v", a)
				}
				if !errors.Is(err, tt.err) && err != tt.err {
					t.Fatalf("err %v, want %v unchanged", err, tt.err)
				}
				return
			}
			if !ok || a.Status != tt.wantStatus {
				t.Fatalf("err %v, want status %d", err, tt.wantStatus)
			}
			want := []contract.Header{{Name: "content-type", Value: "application/json"}, {Name: DroppedReasonHeader, Value: tt.wantReason}}
			if !slices.Equal(a.Headers, want) {
				t.Fatalf("headers %v, want %v", a.Headers, want)
			}
			var body protocol.OpenAIError
			if err := json.Unmarshal(a.Body, &body); err != nil || body.Error.Code != tt.wantStatus ||
				body.Error.Type != protocol.TypeForStatus(tt.wantStatus) || !strings.Contains(body.Error.Message, tt.err.(errcommon.Error).Msg) {
				t.Fatalf("body %s: %v", a.Body, err)
			}
		})
	}
}
