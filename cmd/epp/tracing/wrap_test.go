package tracing

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/config/loader"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/scheduling"

	"github.com/pdgate/pdgate/cmd/epp/pluginset"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
)

const config = `apiVersion: inference.networking.x-k8s.io/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: queue-scorer
- type: kv-cache-utilization-scorer
- type: utilization-detector
- type: max-score-picker
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: utilization-detector
  - pluginRef: queue-scorer
    weight: 2
  - pluginRef: kv-cache-utilization-scorer
  - pluginRef: max-score-picker
`

// load returns the wrapped and the original scheduler of one config instance.
func load(t testing.TB) (wrapped, original *scheduling.Scheduler) {
	t.Helper()
	raw, _, err := pluginset.LoadRaw([]byte(config), logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	handle := fwkplugin.NewEppHandle(context.Background(), func() []types.NamespacedName { return nil })
	cfg, err := loader.InstantiateAndConfigure(raw, handle, logr.Discard())
	if err != nil {
		t.Fatal(err)
	}
	wcfg, err := WrapSchedulerConfig(raw, handle)
	if err != nil {
		t.Fatal(err)
	}
	return scheduling.NewSchedulerWithConfig(wcfg), scheduling.NewSchedulerWithConfig(cfg.SchedulerConfig)
}

func endpoints() []fwksched.Endpoint {
	var out []fwksched.Endpoint
	for i, q := range []int{0, 3, 9} {
		out = append(out, fwksched.NewEndpoint(&fwkdl.EndpointMetadata{
			NamespacedName: types.NamespacedName{Namespace: "ns", Name: fmt.Sprintf("ep-%d", i)},
			Address:        fmt.Sprintf("10.0.0.%d", i+1), Port: "8000",
		}, &fwkdl.Metrics{WaitingQueueSize: q, KVCacheUsagePercent: 0.1 * float64(i)}, nil))
	}
	return out
}

func TestTraceRecording(t *testing.T) {
	tests := []struct {
		name   string
		begin  bool // the request path opened a trace slot
		wanted bool // and wants the trace
	}{
		{name: "wanted", begin: true, wanted: true},
		{name: "slot but not wanted", begin: true},
		{name: "no slot (a scheduler driven outside the request path)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sched, _ := load(t)
			ctx := log.IntoContext(context.Background(), logr.Discard())
			take := func() *decisiontrace.Trace { return nil }
			if tt.begin {
				ctx, take = Recorder{}.Begin(ctx, tt.wanted)
			}
			req := &fwksched.LLMRequest{RequestId: "r1", TargetModel: "m", Headers: map[string]string{}}
			res, err := sched.Schedule(ctx, req, endpoints())
			if err != nil {
				t.Fatal(err)
			}
			if got := res.ProfileResults["default"].TargetEndpoints[0].GetMetadata().NamespacedName.Name; got != "ep-0" {
				t.Fatalf("picked %s, want ep-0 (lowest queue)", got)
			}
			tr := take()
			if (tr != nil) != tt.wanted {
				t.Fatalf("trace present %v, want %v", tr != nil, tt.wanted)
			}
			if tr == nil {
				return
			}
			if c := tr.Compact(); c != "default=ep-0" {
				t.Errorf("compact %q, want default=ep-0", c)
			}
			if len(tr.Filters) != 1 || tr.Filters[0].Filter != "utilization-detector/utilization-detector" || tr.Filters[0].In != 3 {
				t.Errorf("filters %+v", tr.Filters)
			}
			scorers := map[string]int{}
			for _, s := range tr.Scores {
				scorers[s.Scorer]++
			}
			if scorers["queue-scorer/queue-scorer"] != 3 || scorers["kv-cache-utilization-scorer/kv-cache-utilization-scorer"] != 3 {
				t.Errorf("scores %v", scorers)
			}
		})
	}
}

func TestSchedulingFailureIsExplained(t *testing.T) {
	sched, _ := load(t)
	ctx, take := Recorder{}.Begin(log.IntoContext(context.Background(), logr.Discard()), true)
	req := &fwksched.LLMRequest{RequestId: "r2", Headers: map[string]string{}}
	if _, err := sched.Schedule(ctx, req, nil); err == nil {
		t.Fatal("want an error with no endpoints")
	}
	tr := take()
	if tr == nil || len(tr.Notes) == 0 || !strings.Contains(strings.Join(tr.Notes, " "), "scheduling failed") {
		t.Fatalf("trace %+v lacks the failure", tr)
	}
}

func TestUntracedPathAddsNoAllocations(t *testing.T) {
	wrapped, original := load(t)
	ctx := log.IntoContext(context.Background(), logr.Discard())
	eps := endpoints()
	req := &fwksched.LLMRequest{RequestId: "r3", Headers: map[string]string{}}
	run := func(s *scheduling.Scheduler) float64 {
		return testing.AllocsPerRun(200, func() { _, _ = s.Schedule(ctx, req, eps) })
	}
	base, got := run(original), run(wrapped)
	// The wrappers themselves allocate nothing when the cycle is not traced; allow one
	// allocation of slack for the scheduler's own map-iteration noise.
	if got > base+1 {
		t.Fatalf("wrapped scheduler allocates %.1f per cycle, unwrapped %.1f", got, base)
	}
}

func BenchmarkScheduleWrappedVsOriginal(b *testing.B) {
	wrapped, original := load(b)
	ctx := log.IntoContext(context.Background(), logr.Discard())
	tracedCtx, _ := Recorder{}.Begin(ctx, true)
	eps := endpoints()
	req := &fwksched.LLMRequest{RequestId: "r4", Headers: map[string]string{}}
	// Variants are interleaved in rounds inside one run so that machine noise hits all three
	// alike; the reported figures are ratios to the unwrapped scheduler.
	const rounds, perRound = 20, 200
	var base, untraced, traced time.Duration
	measure := func(s *scheduling.Scheduler, ctx context.Context) time.Duration {
		start := time.Now()
		for i := 0; i < perRound; i++ {
			_, _ = s.Schedule(ctx, req, eps)
		}
		return time.Since(start)
	}
	for i := 0; i < b.N; i++ {
		for j := 0; j < rounds; j++ {
			base += measure(original, ctx)
			untraced += measure(wrapped, ctx)
			traced += measure(wrapped, tracedCtx)
		}
	}
	b.ReportMetric(float64(untraced)/float64(base), "untraced/original")
	b.ReportMetric(float64(traced)/float64(base), "traced/original")
	b.ReportMetric(float64(base.Nanoseconds())/float64(b.N*rounds*perRound), "original-ns/op")
}
