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
type Batcher struct {
	exp sdktrace.SpanExporter
	cfg BatchConfig

	mu      sync.Mutex
	queue   []sdktrace.ReadOnlySpan
	dropped int
	stopped bool

	full    chan struct{}   // a batch is ready (buffered, one pending signal at most)
	flushes chan chan error // ForceFlush asks the export goroutine to export now
	stop    chan struct{}
	done    chan struct{} // the export goroutine returned
	once    sync.Once
}

var _ sdktrace.SpanProcessor = (*Batcher)(nil)

// NewBatcher starts a Batcher exporting to exp. End it with Shutdown.
func NewBatcher(exp sdktrace.SpanExporter, cfg BatchConfig) *Batcher {
	b := newBatcher(exp, cfg)
	go b.run()
	return b
}

// newBatcher is a Batcher without its export goroutine.
func newBatcher(exp sdktrace.SpanExporter, cfg BatchConfig) *Batcher {
	return &Batcher{exp: exp, cfg: cfg, queue: make([]sdktrace.ReadOnlySpan, 0, cfg.MaxExportBatchSize),
		full: make(chan struct{}, 1), flushes: make(chan chan error), stop: make(chan struct{}), done: make(chan struct{})}
}

// OnStart implements sdktrace.SpanProcessor: a span is of no interest until it ends.
func (*Batcher) OnStart(context.Context, sdktrace.ReadWriteSpan) {}

// OnEnd implements sdktrace.SpanProcessor: it queues a sampled span for export, or drops it
// when the queue is full (the exporter is slower than the spans come).
func (b *Batcher) OnEnd(s sdktrace.ReadOnlySpan) {
	if !s.SpanContext().IsSampled() {
		return
	}
	b.mu.Lock()
	if b.stopped {
		b.mu.Unlock()
		return
	}
	if len(b.queue) >= b.cfg.MaxQueueSize {
		b.dropped++
		b.mu.Unlock()
		return
	}
	b.queue = append(b.queue, s)
	n := len(b.queue)
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
	var batch []sdktrace.ReadOnlySpan
	for {
		select {
		case <-tick.C:
			batch = b.export(context.Background(), batch)
		case <-b.full:
			batch = b.export(context.Background(), batch)
		case reply := <-b.flushes:
			batch = b.export(context.Background(), batch)
			reply <- nil
		case <-b.stop:
			b.export(context.Background(), batch)
			return
		}
	}
}

// export takes the queue, leaving spare (emptied) in its place so that the two slices take
// turns and a steady flow allocates none, and exports it in batches of MaxExportBatchSize. It
// returns the emptied slice for the next turn. Errors go to the OpenTelemetry error handler,
// as the SDK's processor reports them: a collector that is down must not stop the EPP.
func (b *Batcher) export(ctx context.Context, spare []sdktrace.ReadOnlySpan) []sdktrace.ReadOnlySpan {
	b.mu.Lock()
	batch, dropped := b.queue, b.dropped
	b.queue, b.dropped = spare[:0], 0
	b.mu.Unlock()
	if dropped > 0 {
		otel.Handle(fmt.Errorf("trace export: %d spans dropped, the queue of %d was full", dropped, b.cfg.MaxQueueSize))
	}
	for rest := batch; len(rest) > 0; {
		n := min(len(rest), b.cfg.MaxExportBatchSize)
		ectx, cancel := context.WithTimeout(ctx, b.cfg.ExportTimeout)
		if err := b.exp.ExportSpans(ectx, rest[:n]); err != nil {
			otel.Handle(fmt.Errorf("exporting %d spans: %w", n, err))
		}
		cancel()
		rest = rest[n:]
	}
	clear(batch) // the exported spans must not stay reachable from the spare slice
	return batch[:0]
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
