package telemetry

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
)

func TestBatchConfigFromEnv(t *testing.T) {
	for _, c := range []struct {
		name string
		env  map[string]string
		want BatchConfig
		err  string
	}{
		{name: "defaults", want: DefaultBatchConfig},
		{name: "every variable", env: map[string]string{EnvBSPScheduleDelay: "200", EnvBSPExportTimeout: "1000",
			EnvBSPMaxQueueSize: "100", EnvBSPMaxExportBatch: "10"},
			want: BatchConfig{ScheduleDelay: 200 * time.Millisecond, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 10}},
		{name: "batch larger than the queue is cut to it", env: map[string]string{EnvBSPMaxQueueSize: "64"},
			want: BatchConfig{ScheduleDelay: 5 * time.Second, ExportTimeout: 30 * time.Second, MaxQueueSize: 64, MaxExportBatchSize: 64}},
		{name: "not a number", env: map[string]string{EnvBSPScheduleDelay: "1s"}, err: EnvBSPScheduleDelay},
		{name: "zero", env: map[string]string{EnvBSPMaxQueueSize: "0"}, err: EnvBSPMaxQueueSize},
		{name: "negative", env: map[string]string{EnvBSPMaxExportBatch: "-5"}, err: EnvBSPMaxExportBatch},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, err := BatchConfigFromEnv(func(k string) string { return c.env[k] })
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err %v, want one naming %s", err, c.err)
				}
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("got %+v, %v; want %+v", got, err, c.want)
			}
		})
	}
}

// exporter records what it is sent; while hold is open, exports wait for it to close.
type exporter struct {
	mu       sync.Mutex
	batches  [][]string
	shutdown bool
	hold     chan struct{}
	err      error
}

func (e *exporter) ExportSpans(_ context.Context, spans []sdktrace.ReadOnlySpan) error {
	if e.hold != nil {
		<-e.hold
	}
	names := make([]string, len(spans))
	for i, s := range spans {
		names[i] = s.Name()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.batches = append(e.batches, names)
	return e.err
}

func (e *exporter) Shutdown(context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.shutdown = true
	return nil
}

// sizes is the size of each export so far.
func (e *exporter) sizes() []int {
	e.mu.Lock()
	defer e.mu.Unlock()
	var out []int
	for _, b := range e.batches {
		out = append(out, len(b))
	}
	return out
}

// waitSpans waits until n spans were exported, or fails after a generous deadline (a hang,
// not a slow machine).
func (e *exporter) waitSpans(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		got := 0
		for _, s := range e.sizes() {
			got += s
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans exported, want %d", got, n)
		}
	}
}

func newTracer(t *testing.T, cfg BatchConfig, exp *exporter, sampler sdktrace.Sampler) (trace.Tracer, *Batcher) {
	b := NewBatcher(exp, cfg)
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b), sdktrace.WithSampler(sampler))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp.Tracer("test"), b
}

func endSpans(tr trace.Tracer, n int) {
	for range n {
		_, s := tr.Start(context.Background(), "s")
		s.End()
	}
}

const never = time.Hour // a schedule delay no test waits for

// The Batcher exports at every tick and when a batch is full (without waiting for the tick),
// and only sampled spans.
func TestBatcherExports(t *testing.T) {
	for _, c := range []struct {
		name    string
		cfg     BatchConfig
		sampler sdktrace.Sampler
		spans   int
		flush   bool
		want    []int // export sizes
	}{
		{name: "tick", cfg: BatchConfig{ScheduleDelay: 10 * time.Millisecond, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 50},
			sampler: sdktrace.AlwaysSample(), spans: 1, want: []int{1}},
		{name: "full batch", cfg: BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 4},
			sampler: sdktrace.AlwaysSample(), spans: 4, want: []int{4}},
		{name: "unsampled spans stay out", cfg: BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 4},
			sampler: sdktrace.NeverSample(), spans: 8, flush: true, want: nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			exp := &exporter{}
			tr, b := newTracer(t, c.cfg, exp, c.sampler)
			endSpans(tr, c.spans)
			if c.flush {
				if err := b.ForceFlush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			total := 0
			for _, n := range c.want {
				total += n
			}
			exp.waitSpans(t, total)
			if got := exp.sizes(); !equalInts(got, c.want) {
				t.Fatalf("exports of %v spans, want %v", got, c.want)
			}
		})
	}
}

// What is queued goes out in exports of at most MaxExportBatchSize spans, and the queue's
// slice and the spare one take turns.
func TestBatcherExportsInBatches(t *testing.T) {
	exp := &exporter{}
	b := newBatcher(exp, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 40})
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b)).Tracer("test")
	endSpans(tr, 90)
	queued := b.queue
	spare := b.export(context.Background(), make([]sdktrace.ReadOnlySpan, 0, 8))
	if got := exp.sizes(); !equalInts(got, []int{40, 40, 10}) {
		t.Fatalf("exports %v, want [40 40 10]", got)
	}
	if len(spare) != 0 || cap(spare) != cap(queued) || len(b.queue) != 0 || cap(b.queue) != 8 {
		t.Fatalf("after an export: spare len %d cap %d (queue's cap was %d), queue len %d cap %d; want the two slices swapped",
			len(spare), cap(spare), cap(queued), len(b.queue), cap(b.queue))
	}
	if queued[:cap(queued)][0] != nil {
		t.Fatal("an exported span is still reachable from the spare slice")
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// Spans ended while the queue is full are dropped and reported to the OpenTelemetry error
// handler; an export error is reported there too and the Batcher goes on.
func TestBatcherDropsAndReports(t *testing.T) {
	var mu sync.Mutex
	var reported []string
	prev := otel.GetErrorHandler()
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reported = append(reported, err.Error())
	}))
	t.Cleanup(func() { otel.SetErrorHandler(prev) })

	exp := &exporter{hold: make(chan struct{}), err: errors.New("collector down")}
	tr, b := newTracer(t, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 4, MaxExportBatchSize: 4}, exp, sdktrace.AlwaysSample())
	endSpans(tr, 4) // a full batch: its export starts and waits on hold, the queue is empty again
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		b.mu.Lock()
		n := len(b.queue)
		b.mu.Unlock()
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the full batch was not taken for export")
		}
	}
	endSpans(tr, 7) // 4 queue, 3 are dropped
	close(exp.hold)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); !equalInts(got, []int{4, 4}) {
		t.Fatalf("exports %v, want [4 4]", got)
	}
	mu.Lock()
	defer mu.Unlock()
	all := strings.Join(reported, "\n")
	if !strings.Contains(all, "3 spans dropped") || strings.Count(all, "collector down") != 2 {
		t.Fatalf("reported:\n%s\nwant 3 dropped spans and both export errors", all)
	}
}

// Shutdown exports what is queued, shuts the exporter down, and ignores later spans.
func TestBatcherShutdown(t *testing.T) {
	exp := &exporter{}
	b := NewBatcher(exp, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 50})
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b)).Tracer("test")
	endSpans(tr, 5)
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatal(err)
	}
	endSpans(tr, 5)
	if err := b.ForceFlush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := exp.sizes(); !equalInts(got, []int{5}) || !exp.shutdown {
		t.Fatalf("exports %v, exporter shut down %v; want [5], true", got, exp.shutdown)
	}
	if err := b.Shutdown(context.Background()); err != nil {
		t.Fatalf("second Shutdown: %v", err)
	}
}

// Handing an ended span over allocates nothing: the request path pays a lock and an append.
func TestBatcherOnEndAllocatesNothing(t *testing.T) {
	exp := &exporter{}
	b := NewBatcher(exp, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 1000, MaxExportBatchSize: 1000})
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	_, s := tp.Tracer("test").Start(context.Background(), "s")
	s.End()
	ro := s.(sdktrace.ReadOnlySpan)
	if n := testing.AllocsPerRun(200, func() { b.OnEnd(ro) }); n != 0 {
		t.Fatalf("%v allocations per span handed over, want 0", n)
	}
}
