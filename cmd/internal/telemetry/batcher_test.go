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
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
	"google.golang.org/protobuf/proto"
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

// waitSpans waits until the batches sizes reports hold n spans, or fails after a generous
// deadline (a hang, not a slow machine); what names the sink in the failure.
func waitSpans(t *testing.T, n int, what string, sizes func() []int) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		got := 0
		for _, s := range sizes() {
			got += s
		}
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d spans %s, want %d", got, what, n)
		}
	}
}

func newTracer(t *testing.T, cfg BatchConfig, exp *exporter, sampler sdktrace.Sampler) (trace.Tracer, *Batcher) {
	b := NewBatcher(exp, &uploader{}, cfg)
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
			waitSpans(t, total, "exported", exp.sizes)
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
	up := &uploader{}
	b := newBatcher(exp, up, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 200, MaxExportBatchSize: 40})
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b)).Tracer("test")
	endSpans(tr, 90)
	for range 50 {
		b.onEndRecord(record{origin: &origin{}, name: "r"})
	}
	queued, recs := b.queue, b.recs
	sp := spare{queue: make([]sdktrace.ReadOnlySpan, 0, 8), recs: make([]record, 0, 9)}
	b.export(context.Background(), &sp)
	if got := exp.sizes(); !equalInts(got, []int{40, 40, 10}) {
		t.Fatalf("exports %v, want [40 40 10]", got)
	}
	if got := up.sizes(); !equalInts(got, []int{40, 10}) {
		t.Fatalf("uploads %v, want [40 10]", got)
	}
	if len(sp.queue) != 0 || cap(sp.queue) != cap(queued) || len(b.queue) != 0 || cap(b.queue) != 8 ||
		len(sp.recs) != 0 || cap(sp.recs) != cap(recs) || len(b.recs) != 0 || cap(b.recs) != 9 {
		t.Fatalf("after an export: spare len %d cap %d (queue's cap was %d), queue len %d cap %d; want the slices swapped",
			len(sp.queue), cap(sp.queue), cap(queued), len(b.queue), cap(b.queue))
	}
	if queued[:cap(queued)][0] != nil || recs[:cap(recs)][0].origin != nil {
		t.Fatal("an exported span is still reachable from a spare slice")
	}
	// The OTLP messages kept for the next batch hold no pointer: every collection cycle
	// would follow them again.
	o := &sp.otlp
	if len(o.spans) == 0 || cap(o.kvs) == 0 && cap(o.spans) == 0 {
		t.Fatal("no OTLP messages were built")
	}
	for i := range o.spans[:cap(o.spans)] {
		if s := &o.spans[:cap(o.spans)][i]; s.Name != "" || s.Status != nil || s.TraceId != nil || o.spanPtrs[:cap(o.spanPtrs)][i] != nil {
			t.Fatalf("span message %d still points at the exported batch: %v", i, s)
		}
	}
	for i := range o.rs[:cap(o.rs)] {
		if o.rs[:cap(o.rs)][i].ScopeSpans != nil || o.scopes[:cap(o.scopes)][i].Spans != nil || o.rsPtrs[:cap(o.rsPtrs)][i] != nil {
			t.Fatalf("resource or scope message %d still points at the exported batch", i)
		}
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
	b := NewBatcher(exp, &uploader{}, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 100, MaxExportBatchSize: 50})
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
	b := NewBatcher(exp, &uploader{}, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 1000, MaxExportBatchSize: 1000})
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b))
	_, s := tp.Tracer("test").Start(context.Background(), "s")
	s.End()
	ro := s.(sdktrace.ReadOnlySpan)
	if n := testing.AllocsPerRun(200, func() { b.OnEnd(ro) }); n != 0 {
		t.Fatalf("%v allocations per span handed over, want 0", n)
	}
	r := record{origin: &origin{}, name: "r"}
	if n := testing.AllocsPerRun(200, func() { b.onEndRecord(r) }); n != 0 {
		t.Fatalf("%v allocations per record handed over, want 0", n)
	}
}

// The full-batch signal and the queue limit count the SDK's spans and the records together.
func TestBatcherQueueCountsRecords(t *testing.T) {
	exp, up := &exporter{}, &uploader{}
	b := NewBatcher(exp, up, BatchConfig{ScheduleDelay: never, ExportTimeout: time.Second, MaxQueueSize: 6, MaxExportBatchSize: 6})
	t.Cleanup(func() { _ = b.Shutdown(context.Background()) })
	tr := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(b)).Tracer("test")
	endSpans(tr, 3)
	for range 3 {
		b.onEndRecord(record{origin: &origin{}, name: "r"}) // the sixth span fills the batch
	}
	waitSpans(t, 3, "exported", exp.sizes)
	waitSpans(t, 3, "uploaded", up.sizes)
}

// uploader records the spans it is sent, in OTLP form.
type uploader struct {
	mu      sync.Mutex
	batches [][]*tracepb.ResourceSpans
}

func (u *uploader) UploadTraces(_ context.Context, rs []*tracepb.ResourceSpans) error {
	u.mu.Lock()
	defer u.mu.Unlock()
	cp := make([]*tracepb.ResourceSpans, len(rs))
	for i, r := range rs {
		cp[i] = proto.Clone(r).(*tracepb.ResourceSpans) // the Batcher reuses its messages
	}
	u.batches = append(u.batches, cp)
	return nil
}

// sizes is the number of spans in each upload so far.
func (u *uploader) sizes() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]int, len(u.batches))
	for i, b := range u.batches {
		out[i] = len(uploadSpans(b))
	}
	return out
}

// spans is every span uploaded so far.
func (u *uploader) spans() []*tracepb.Span {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []*tracepb.Span
	for _, b := range u.batches {
		out = append(out, uploadSpans(b)...)
	}
	return out
}

// uploadSpans is the spans of one upload, in order.
func uploadSpans(upload []*tracepb.ResourceSpans) []*tracepb.Span {
	var out []*tracepb.Span
	for _, rs := range upload {
		for _, ss := range rs.ScopeSpans {
			out = append(out, ss.Spans...)
		}
	}
	return out
}
