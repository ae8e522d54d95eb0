package extproc

import (
	"context"
	"testing"
	"time"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/handlers"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// queueingAdmission holds every request for hold before admitting it, as flow control does
// while the pool is saturated.
type queueingAdmission struct{ hold time.Duration }

func (q queueingAdmission) Admit(context.Context, *handlers.RequestContext, int) error {
	time.Sleep(q.hold)
	return nil
}

// waitSeer records the queue wait its admission and PreRequest hooks were given.
type waitSeer struct{ admit, pre time.Duration }

func (w *waitSeer) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "wait-seer", Name: "w"}
}
func (w *waitSeer) AdmitRequest(ctx context.Context, _ *fwksched.LLMRequest, _ []fwksched.Endpoint) error {
	w.admit = contract.QueueWait(ctx)
	return nil
}
func (w *waitSeer) PreRequest(ctx context.Context, _ *fwksched.LLMRequest, _ *fwksched.SchedulingResult) {
	w.pre = contract.QueueWait(ctx)
}

// TestQueueWaitReachesThePlugins: a request flow control held reaches the admission and
// PreRequest hooks with the time it waited (forecast-admitter counts it against the TTFT); the
// legacy check queues nothing, so without flow control no wait is reported, whatever admission
// took.
func TestQueueWaitReachesThePlugins(t *testing.T) {
	const hold = 20 * time.Millisecond
	for _, flowControl := range []bool{true, false} {
		w := &waitSeer{}
		srv := New(Config{Datastore: fakeDS{}, Scheduler: &fakeScheduler{}, Admission: queueingAdmission{hold: hold},
			Candidates: fakeCandidates{}, Plugins: []fwkplugin.Plugin{w}, FlowControl: flowControl}, Options{})
		req := &fwksched.LLMRequest{RequestId: "r", TargetModel: "m", Headers: map[string]string{}}
		dec, err := srv.Director().Decide(context.Background(), NewRequest(req, "m", time.Now()))
		if err != nil {
			t.Fatalf("flow control %v: %v", flowControl, err)
		}
		switch {
		case flowControl && (w.admit < hold || w.pre != w.admit || w.admit != dec.AdmissionWait):
			t.Errorf("flow control: hooks saw a queue wait of %v (admission) and %v (PreRequest), want the %v admission took (≥ %v)",
				w.admit, w.pre, dec.AdmissionWait, hold)
		case !flowControl && (w.admit != 0 || w.pre != 0):
			t.Errorf("legacy admission: hooks saw a queue wait of %v and %v, want none", w.admit, w.pre)
		}
	}
}
