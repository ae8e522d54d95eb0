package telemetry

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// retainedSink keeps a variant's structures reachable while its collections run.
var retainedSink any

// BenchmarkRetainedByExport is one garbage collection cycle with what an export goroutine can
// keep between two exports of 300 spans, on a heap otherwise the same, so the differences are
// what those pointer-holding arrays add to every cycle: "kept" is the Batcher's (the spare
// pair of full-batch queues, 512 records each, and the batch's OTLP messages, zeroed, for
// reuse), "queues" the queues alone, "messages" one queue sized to the batch with the zeroed
// messages, "dropped" that queue alone (messages built again for each batch). Instruction
// counts: run each variant under callgrind at two -test.benchtime counts and subtract
// (docs/benchmarks.md, "Tracing on against off").
func BenchmarkRetainedByExport(b *testing.B) {
	const spans = 300
	o := &origin{}
	recs := make([]record, spans)
	for i := range recs {
		recs[i] = record{origin: o, name: "gateway.request", kind: trace.SpanKindServer, start: time.Unix(1, 0), end: time.Unix(2, 0),
			attrs: []attribute.KeyValue{attribute.String("pdgate.request_id", fmt.Sprint("req-", i)), attribute.String("pdgate.phase", "epp_queue")}}
	}
	cfg := DefaultBatchConfig
	variants := []struct {
		name string
		keep func() any
	}{
		{"kept", func() any {
			var batch otlpBatch
			batch.build(recs)
			batch.release() // zeroed as the export leaves them after an upload
			return []any{make([]record, 0, cfg.MaxExportBatchSize), make([]record, 0, cfg.MaxExportBatchSize), &batch}
		}},
		{"queues", func() any {
			return []any{make([]record, 0, cfg.MaxExportBatchSize), make([]record, 0, cfg.MaxExportBatchSize)}
		}},
		{"messages", func() any {
			var batch otlpBatch
			batch.build(recs)
			batch.release() // zeroed as the export leaves them after an upload
			return []any{make([]record, 0, spans+spans/4), &batch}
		}},
		{"dropped", func() any {
			return make([]record, 0, spans+spans/4)
		}},
	}
	for _, v := range variants {
		b.Run(v.name, func(b *testing.B) {
			retainedSink = v.keep()
			runtime.GC()
			b.ResetTimer()
			for range b.N {
				runtime.GC()
			}
			b.StopTimer()
			retainedSink = nil
		})
	}
}
