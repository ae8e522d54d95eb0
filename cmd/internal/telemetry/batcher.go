package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	tracepb "go.opentelemetry.io/proto/otlp/trace/v1"
)

// The batch settings the SDK's batch span processor reads, honoured with the same meaning and
// defaults (the OpenTelemetry specification's).
const (
	EnvBSPScheduleDelay  = "OTEL_BSP_SCHEDULE_DELAY"
	EnvBSPExportTimeout  = "OTEL_BSP_EXPORT_TIMEOUT"
	EnvBSPMaxQueueSize   = "OTEL_BSP_MAX_QUEUE_SIZE"
	EnvBSPMaxExportBatch = "OTEL_BSP_MAX_EXPORT_BATCH_SIZE"
)

// BatchConfig is when a Batcher exports.
type BatchConfig struct {
	// ScheduleDelay is the longest an ended span waits before its export starts.
	ScheduleDelay time.Duration
	// ExportTimeout bounds one export call.
	ExportTimeout time.Duration
	// MaxQueueSize is how many ended spans may wait; the spans ended beyond it are dropped.
	MaxQueueSize int
	// MaxExportBatchSize is the most spans one export call carries; a queue this long is
	// exported at once rather than at the next tick.
	MaxExportBatchSize int
}

// DefaultBatchConfig is the specification's defaults, the SDK batch processor's.
var DefaultBatchConfig = BatchConfig{ScheduleDelay: 5 * time.Second, ExportTimeout: 30 * time.Second,
	MaxQueueSize: 2048, MaxExportBatchSize: 512}

// BatchConfigFromEnv reads the OTEL_BSP_* variables over the defaults. As in the SDK, an
// export batch larger than the queue is cut to the queue's size; a malformed or non-positive
// value is an error rather than silently a default.
func BatchConfigFromEnv(getenv func(string) string) (BatchConfig, error) {
	c := DefaultBatchConfig
	ms := func(name string, d *time.Duration) error {
		n, err := positiveEnv(getenv, name)
		if n > 0 {
			*d = time.Duration(n) * time.Millisecond
		}
		return err
	}
	count := func(name string, v *int) error {
		n, err := positiveEnv(getenv, name)
		if n > 0 {
			*v = n
		}
		return err
	}
	if err := errors.Join(ms(EnvBSPScheduleDelay, &c.ScheduleDelay), ms(EnvBSPExportTimeout, &c.ExportTimeout),
		count(EnvBSPMaxQueueSize, &c.MaxQueueSize), count(EnvBSPMaxExportBatch, &c.MaxExportBatchSize)); err != nil {
		return BatchConfig{}, err
	}
	c.MaxExportBatchSize = min(c.MaxExportBatchSize, c.MaxQueueSize)
	return c, nil
}

// positiveEnv is a variable's positive integer value, 0 when unset.
func positiveEnv(getenv func(string) string, name string) (int, error) {
	s := strings.TrimSpace(getenv(name))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		return 0, fmt.Errorf("%s=%q: want a positive integer", name, s)
	}
	return n, nil
}

// Batcher is a span processor that exports ended spans in batches, like the SDK's batch span
// processor, but hands a span over by appending it to a slice under a mutex. The SDK's
// processor sends every span on a channel to its export goroutine, which wakes that goroutine
// once per span (three times per EPP request); here the export goroutine wakes once per
// ScheduleDelay, or once a batch is full, so a span's hand-over costs the request path a lock
// and an append.
//
// Besides the SDK's spans it queues the spans a Tracer records itself (records) and converts
// those to OTLP directly (otlpBatch), handing them to the exporter's client (up), not to the
// exporter: the exporter's conversion of an SDK span, through its snapshot, was most of what
// a traced EPP request cost.
type Batcher struct {
	exp sdktrace.SpanExporter
	up  Uploader
	cfg BatchConfig

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	recs    []record
	dropped int
	stopped bool

	full    chan struct{}   // a batch is ready (buffered, one pending signal at most)
	flushes chan chan error // ForceFlush asks the export goroutine to export now
	stop    chan struct{}
	done    chan struct{} // the export goroutine returned
	once    sync.Once
}

var _ sdktrace.SpanProcessor = (*Batcher)(nil)

// Uploader sends spans already in OTLP form: the OTLP exporters' client
// (otlptrace.Client, e.g. otlptracegrpc.NewClient), the one behind exp.
type Uploader interface {
	UploadTraces(ctx context.Context, spans []*tracepb.ResourceSpans) error
}

// NewBatcher starts a Batcher exporting the SDK's spans to exp and the Tracer's own spans
// through up, which must be exp's client (exp's Shutdown stops it). End it with Shutdown.
func NewBatcher(exp sdktrace.SpanExporter, up Uploader, cfg BatchConfig) *Batcher {
	b := newBatcher(exp, up, cfg)
	go b.run()
	return b
}

// newBatcher is a Batcher without its export goroutine.
func newBatcher(exp sdktrace.SpanExporter, up Uploader, cfg BatchConfig) *Batcher {
	return &Batcher{exp: exp, up: up, cfg: cfg, queue: make([]sdktrace.ReadOnlySpan, 0, cfg.MaxExportBatchSize),
		recs: make([]record, 0, cfg.MaxExportBatchSize),
		full: make(chan struct{}, 1), flushes: make(chan chan error), stop: make(chan struct{}), done: make(chan struct{})}
}

// OnStart implements sdktrace.SpanProcessor: a span is of no interest until it ends.
func (*Batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it queues a sampled span for export, or drops it
// when the queue is full (the exporter is slower than the spans come).
func (b *Batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() || !b.admit() {
		return
	}
	b.queue = append(b.queue, s)
	b.queued()
}

// onEndRecord queues a sampled span a Tracer recorded, as OnEnd queues the SDK's.
func (b *Batcher) onEndRecord(r record) {
	if !b.admit() {
		return
	}
	b.recs = append(b.recs, r)
	b.queued()
}

// admit locks b.mu and tells whether one more span may be queued, counting the one dropped
// when the queue is full. On true the caller queues the span and calls queued, which unlocks;
// on false b.mu is already unlocked. The lock is taken here and released in queued so that
// both ways into the queue follow the one protocol.
func (b *Batcher) admit() bool {
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return false
	}
	if len(b.queue)+len(b.recs) >= b.cfg.MaxQueueSize {
		b.dropped++
		b.mu.Unlock()
		return false
	}
	return true
}

// queued unlocks b.mu after a span was queued and signals a full batch.
func (b *Batcher) queued() {
	n := len(b.queue) + len(b.recs)
	b.mu.Unlock()
	if n == b.cfg.MaxExportBatchSize {
		select {
		case b.full <- struct{}{}:
		default:
		}
	}
}

// run is the export goroutine: it exports what is queued at every tick, when a batch is full
// and when asked to flush, and everything left at shutdown.
func (b *Batcher) run() {
	defer close(b.done)
	tick := time.NewTicker(b.cfg.ScheduleDelay)
	defer tick.Stop()
	var sp spare
	for {
		select {
		case <-tick.C:
			b.export(context.Background(), &sp)
		case <-b.full:
			b.export(context.Background(), &sp)
		case reply := <-b.flushes:
			b.export(context.Background(), &sp)
			reply <- nil
		case <-b.stop:
			b.export(context.Background(), &sp)
			return
		}
	}
}

// spare is what the export goroutine keeps between exports: the emptied queues that take
// turns with the Batcher's, and the OTLP messages it rebuilds for each batch of records.
type spare struct {
	queue []sdktrace.ReadOnlySpan
	recs  []record
	otlp  otlpBatch
}

// export takes the queues, leaving the spare (emptied) ones in their place so that the two
// pairs take turns and a steady flow allocates none, and exports them in batches of
// MaxExportBatchSize: the SDK's spans through the exporter, the records through the
// exporter's client. Errors go to the OpenTelemetry error handler, as the SDK's processor
// reports them: a collector that is down must not stop the EPP.
func (b *Batcher) export(ctx context.Context, sp *spare) {
	b.mu.Lock()
	queue, recs, dropped := b.queue, b.recs, b.dropped
	b.queue, b.recs, b.dropped = sp.queue[:0], sp.recs[:0], 0
	b.mu.Unlock()
	if dropped > 0 {
		otel.Handle(fmt.Errorf("trace export: %d spans dropped, the queue of %d was full", dropped, b.cfg.MaxQueueSize))
	}
	for rest := queue; len(rest) > 0; {
		n := min(len(rest), b.cfg.MaxExportBatchSize)
		b.call(ctx, n, func(ctx context.Context) error { return b.exp.ExportSpans(ctx, rest[:n]) })
		rest = rest[n:]
	}
	for rest := recs; len(rest) > 0; {
		n := min(len(rest), b.cfg.MaxExportBatchSize)
		msgs := sp.otlp.build(rest[:n])
		b.call(ctx, n, func(ctx context.Context) error { return b.up.UploadTraces(ctx, msgs) })
		sp.otlp.release()
		rest = rest[n:]
	}
	// The exported spans must not stay reachable from the spare slices.
	clear(queue)
	clear(recs)
	sp.queue, sp.recs = queue[:0], recs[:0]
}

// call runs one export call of n spans under the export timeout.
func (b *Batcher) call(ctx context.Context, n int, export func(context.Context) error) {
	ctx, cancel := context.WithTimeout(ctx, b.cfg.ExportTimeout)
	defer cancel()
	if err := export(ctx); err != nil {
		otel.Handle(fmt.Errorf("exporting %d spans: %w", n, err))
	}
}

// ForceFlush implements sdktrace.SpanProcessor: it exports every span ended so far.
func (b *Batcher) ForceFlush(ctx context.Context) error {
	reply := make(chan error, 1)
	select {
	case b.flushes <- reply:
	case <-b.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("flushing spans: %w", ctx.Err())
	}
	select {
	case err := <-reply:
		return err
	case <-ctx.Done():
		return fmt.Errorf("flushing spans: %w", ctx.Err())
	}
}

// Shutdown implements sdktrace.SpanProcessor: it exports what is queued, then shuts the
// exporter down. Spans ended afterwards are ignored.
func (b *Batcher) Shutdown(ctx context.Context) error {
	var err error
	b.once.Do(func() {
		b.mu.Lock()
		b.stopped = true
		b.mu.Unlock()
		close(b.stop)
		select {
		case <-b.done:
		case <-ctx.Done():
			err = fmt.Errorf("exporting the last spans: %w", ctx.Err())
			return
		}
		if e := b.exp.Shutdown(ctx); e != nil {
			err = fmt.Errorf("shutting down the span exporter: %w", e)
		}
	})
	return err
}
