package hermetic

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/go-cmp/cmp"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/giehermetic"
)

const (
	// caseTimeout bounds one case: world, bin/epp start and sync, exchange, metrics.
	caseTimeout = 45 * time.Second
	// streamTimeout is GIE's StreamedRequest timeout.
	streamTimeout = 10 * time.Second
	// metricsTimeout is GIE's ExpectMetrics window (2 s) with slack for a scrape over HTTP.
	metricsTimeout = 3 * time.Second
	errorTotal     = "inference_objective_request_error_total"
)

// wantErrors are inference_objective_request_error_total series beyond GIE's own expectations
// (GIE's suite asserts no error counter): what GIE v1.5.0's StreamingServer records when it
// answers a case with an error (pkg/epp/handlers/server.go: RecordRequestErrCounter(incoming
// model, target model, CanonicalCode(err)) once per stream), test/conformance's stock path
// included. Every other case must leave the family empty.
var wantErrors = map[string]map[string]string{
	"no backend pods available": {
		errorTotal + "{error_code=Internal,model_name=,target_model_name=}": "1"},
	"request missing model field": {
		errorTotal + "{error_code=BadRequest,model_name=,target_model_name=}": "1"},
	"invalid json body": {
		errorTotal + "{error_code=BadRequest,model_name=,target_model_name=}": "1"},
	"subsetting: no pods match": {
		errorTotal + "{error_code=ServiceUnavailable,model_name=" + giehermetic.ModelSQLLora +
			",target_model_name=" + giehermetic.ModelSQLLoraTarget + "}": "1"},
}

// wantRouteWithoutGIEExpectation: GIE's "protocol: simple GET (header only)" expects no
// response (its harness reads none), so it asserts nothing. Stock GIE routes such a request to
// a random endpoint (test/conformance anchors it), and so must bin/epp: the only pod.
const headerOnlyCase = "protocol: simple GET (header only)"

// TestGIEHermeticCases runs every case of GIE v1.5.0's hermetic suite against bin/epp in
// Kubernetes mode, one fresh namespace, world and bin/epp per case (GIE's harness builds one
// EPP per case too, so every counter starts at zero), and asserts GIE's expected responses and
// metrics up to the differences cmd/epp/README.md documents:
//
//   - only changed headers are sent: GIE's echo of unchanged request/response headers is
//     compared as the effective header map (the client's headers with the mutation applied);
//   - client routing headers (protocol.RoutingHeaders) are removed: dropped from both sides,
//     and bin/epp must list every one in RemoveHeaders;
//   - GIE's x-went-into-resp-headers debugging header: dropped from GIE's expectation, and
//     bin/epp must never send it;
//   - body framing: both chunk at GIE's 62,000 bytes; bodies compare
//     concatenated, with the end-of-stream flag of the last frame.
//
// GIE's OpenTelemetry span expectation (wantSpans of the first case) is not asserted: pdgate
// documents that its request path emits no spans.
// runID numbers the namespaces of every case run in this process.
var runID atomic.Int64

func TestGIEHermeticCases(t *testing.T) {
	suite.NeedControlPlane(t)
	for i, c := range giehermetic.Cases(giehermetic.GIEAddress) {
		t.Run(c.Name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithTimeout(context.Background(), caseTimeout)
			defer cancel()
			port, fakes := servePods(t, c.Pods)
			tc := giehermetic.Cases(func(idx int) string { return podIP(idx) + ":" + strconv.Itoa(port) })[i]
			// One namespace per case and run: a repeated run (-count) on the same control plane
			// must not meet the previous run's namespaces while they terminate.
			ns := fmt.Sprintf("gie-hermetic-%02d-%d", i, runID.Add(1))
			createWorld(ctx, t, ns, port, tc.Pods)
			e := startEPP(t, ns, tc.Config())
			waitSynced(t, e, fakes, len(tc.Pods))

			client := e.dialExtProc(t)
			sctx, scancel := context.WithTimeout(ctx, streamTimeout)
			resps, err := giehermetic.Exchange(sctx, client, tc.Requests)
			scancel()
			got := giehermetic.Normalise(tc.Requests, resps, err)
			t.Logf("bin/epp outcome: %+v", got)

			if got.DebugHeader {
				t.Errorf("bin/epp sent GIE's debugging header %s to the client", giehermetic.DebugResponseHeader)
			}
			if got.Routed {
				assertRoutingHeadersRemoved(t, resps)
			}
			if tc.Name == headerOnlyCase {
				if got.Immediate != nil || !got.Routed || got.Destination != podIP(0)+":"+strconv.Itoa(port) || got.StreamErr != "" {
					t.Errorf("header-only request: want a route to the only pod %s:%d, got %+v", podIP(0), port, got)
				}
			} else {
				want := giehermetic.Normalise(tc.Requests, tc.WantResponses, nil)
				want.DebugHeader = false // GIE adds it to every response (documented)
				if giehermetic.DropErrorCause(&got) {
					t.Errorf("bin/epp's %d answer names no cause (x-pdgate-error-cause)", got.Immediate.Status)
				}
				if d := cmp.Diff(want, got); d != "" {
					t.Errorf("bin/epp differs from GIE's expected responses (-GIE +bin/epp):\n%s", d)
				}
			}

			for name, wantText := range tc.WantMetrics {
				var lastErr error
				deadline := time.Now().Add(metricsTimeout)
				for {
					if lastErr = e.compareFamily(name, wantText); lastErr == nil || time.Now().After(deadline) {
						break
					}
					time.Sleep(50 * time.Millisecond)
				}
				if lastErr != nil {
					t.Errorf("metric %s differs from GIE's expectation: %v", name, lastErr)
				}
			}
			wantErr := wantErrors[tc.Name]
			if wantErr == nil {
				wantErr = map[string]string{}
			}
			var gotErr map[string]string
			deadline := time.Now().Add(metricsTimeout)
			for {
				fams, ferr := e.families()
				if ferr != nil {
					t.Fatalf("scrape bin/epp: %v", ferr)
				}
				if gotErr = series(fams[errorTotal]); cmp.Equal(wantErr, gotErr) || time.Now().After(deadline) {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			if d := cmp.Diff(wantErr, gotErr); d != "" {
				t.Errorf("%s differs from what stock GIE records (-GIE +bin/epp):\n%s", errorTotal, d)
			}
		})
	}
}

// waitSynced waits, black-box, for what GIE's harness waits for in its datastore before sending
// (WaitForSync, WaitForReadyPodsMetric): the pool synced (bin/epp's readiness), every
// InferenceObjective and the InferenceModelRewrite reconciled (controller-runtime's reconcile
// counters on /metrics), every pod's metrics scraped (twice, so a scrape has been applied),
// and inference_pool_ready_pods equal to the pod count.
func waitSynced(t *testing.T, e *epp, fakes []*fakeVLLM, pods int) {
	t.Helper()
	e.eventually(t, 30*time.Second, "bin/epp ready (InferencePool synced)", e.serving)
	wantObjectives := float64(len(giehermetic.Objectives("")))
	e.eventually(t, 10*time.Second, "objectives and model rewrite reconciled", func() (bool, string) {
		fams, err := e.families()
		if err != nil {
			return false, err.Error()
		}
		obj := counter(fams, "controller_runtime_reconcile_total", map[string]string{"controller": "inferenceobjective", "result": "success"})
		rw := counter(fams, "controller_runtime_reconcile_total", map[string]string{"controller": "inferencemodelrewrite", "result": "success"})
		return obj >= wantObjectives && rw >= 1, fmt.Sprintf("objective reconciles %v, rewrite reconciles %v", obj, rw)
	})
	e.eventually(t, 10*time.Second, "every pod's metrics scraped", func() (bool, string) {
		for _, f := range fakes {
			if n := f.scrapes.Load(); n < 2 {
				return false, fmt.Sprintf("%s scraped %d times", f.state.Name(), n)
			}
		}
		return true, ""
	})
	if pods > 0 {
		want := giehermetic.MetricReadyPods(pods)
		e.eventually(t, 10*time.Second, "inference_pool_ready_pods", func() (bool, string) {
			if err := e.compareFamily("inference_pool_ready_pods", want); err != nil {
				return false, err.Error()
			}
			return true, ""
		})
	}
}

// assertRoutingHeadersRemoved checks pdgate's documented removal of client routing headers:
// the routing decision lists every protocol.RoutingHeaders entry no plugin set (none does in
// GIE's configs) in RemoveHeaders.
func assertRoutingHeadersRemoved(t *testing.T, resps []*extProcPb.ProcessingResponse) {
	t.Helper()
	for _, r := range resps {
		if h := r.GetRequestHeaders(); h != nil {
			removed := h.GetResponse().GetHeaderMutation().GetRemoveHeaders()
			for _, rh := range protocol.RoutingHeaders {
				if !slices.Contains(removed, rh) {
					t.Errorf("routing header %s not in RemoveHeaders %v", rh, removed)
				}
			}
			return
		}
	}
}
