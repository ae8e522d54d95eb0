package eppharness

import (
	"strconv"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
)

// OTLPReceiver is the shared OTLP/gRPC trace endpoint in its counting mode: what a traced
// EPP exports to while the bench meters it; it keeps nothing, and its own CPU is the bench's,
// not the EPP's.
type OTLPReceiver struct {
	*otlpreceiver.Receiver
}

// StartOTLPReceiver listens on a free loopback port.
func StartOTLPReceiver() (*OTLPReceiver, error) {
	r, err := otlpreceiver.Start(otlpreceiver.Options{})
	if err != nil {
		return nil, err
	}
	return &OTLPReceiver{r}, nil
}

// Spans is the number of spans received so far.
func (r *OTLPReceiver) Spans() int64 { return r.Count() }

// otlpEnv points an EPP's OpenTelemetry SDK at endpoint (host:port, plaintext). A ratio of 0
// or 1 samples every request: the worst case, what a gateway that samples everything asks of
// the EPP; below 1 the SDK's parent-based trace-ID ratio sampler samples that fraction of the
// bench's requests (they carry no traceparent). The batch processor keeps its default batch
// size (512) but exports every ExportDelay instead of every 5 s, so that the wait for a
// phase's last export (ExportQuiet) adds little idle time to the phase; at the bench's rates a
// batch still holds over a hundred spans, and the per-export cost is small beside the spans'.
func otlpEnv(endpoint string, ratio float64) []string {
	env := []string{"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=" + strconv.Itoa(int(ExportDelay/time.Millisecond))}
	if ratio <= 0 || ratio >= 1 {
		return append(env, "OTEL_TRACES_SAMPLER=parentbased_always_on")
	}
	return append(env, "OTEL_TRACES_SAMPLER=parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG="+strconv.FormatFloat(ratio, 'g', -1, 64))
}

// ExportDelay is the traced EPP's batch export interval; ExportQuiet, longer, is how long a
// receiver must get nothing before every span made so far counts as exported.
const (
	ExportDelay = time.Second
	ExportQuiet = 1500 * time.Millisecond
)
