package lab

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
)

// With Options.OTLP the lab runs a real OTLP/gRPC trace receiver (cmd/pdgate/lab/otlpreceiver) in
// its own process and points every process that traces (the EPPs, the sidecars, the gateways,
// the simulators) at it with the standard OTEL_* variables, so a lab request's phase timeline can be read
// without installing a collector. Every span received is one JSON line in SpansFile.

// SpansFile is the file, in the run directory, that holds the received spans.
const SpansFile = "spans.jsonl"

// OTLPExportDelay is the traced processes' batch export interval (the SDK's default is 5 s):
// a request's spans reach the file a moment after its response.
const OTLPExportDelay = 200 * time.Millisecond

// spanSink appends each export's spans to the file in one write, so concurrent exports never
// interleave within a line.
type spanSink struct {
	mu     sync.Mutex
	f      *os.File
	err    error
	closed bool
}

func (s *spanSink) write(spans []otlpreceiver.Span) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	for _, sp := range spans {
		if err := enc.Encode(sp); err != nil {
			s.fail(fmt.Errorf("encoding span %s: %w", sp.Name, err))
			return
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.err != nil {
		return
	}
	if _, err := s.f.Write(buf.Bytes()); err != nil {
		s.err = fmt.Errorf("writing %s: %w", s.f.Name(), err)
	}
}

func (s *spanSink) fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err == nil {
		s.err = err
	}
}

// close ends the writes; it returns the first write error, which the lab cannot report while
// running (an export's answer goes to the exporting process, not to the lab's user).
func (s *spanSink) close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return s.err
	}
	s.closed = true
	if err := s.f.Close(); err != nil && s.err == nil {
		s.err = fmt.Errorf("closing %s: %w", s.f.Name(), err)
	}
	return s.err
}

// startOTLP starts the receiver and adds its variables to the lab's processes.
func (l *Lab) startOTLP() error {
	path := filepath.Join(l.Plan.Dir, SpansFile)
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("otlp: %w", err)
	}
	sink := &spanSink{f: f}
	r, err := otlpreceiver.Start(otlpreceiver.Options{OnSpans: sink.write})
	if err != nil {
		_ = f.Close()
		return fmt.Errorf("otlp: %w", err)
	}
	l.otlp, l.spans = r, sink
	l.OTLPEndpoint, l.SpansPath = r.Endpoint(), path
	l.otlpEnv = otlpEnv(r.Endpoint())
	l.traced(l.procs)
	return nil
}

// otlpEnv turns tracing on in pdgate's binaries (cmd/internal/telemetry) towards endpoint,
// whatever the lab's own environment says: the traces endpoint too, because the SDK prefers it
// to the general one; every request sampled, because a lab run is for looking at them.
func otlpEnv(endpoint string) []string {
	return []string{
		"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT=" + endpoint,
		"OTEL_SDK_DISABLED=false", "OTEL_TRACES_EXPORTER=otlp", "OTEL_TRACES_SAMPLER=parentbased_always_on",
		"OTEL_BSP_SCHEDULE_DELAY=" + strconv.Itoa(int(OTLPExportDelay/time.Millisecond)),
	}
}

// traced adds the OTLP variables to the processes that trace (none without a receiver),
// the simulators included: each records its engine's own spans per request.
func (l *Lab) traced(procs []ProcSpec) {
	if l.otlpEnv == nil {
		return
	}
	for i := range procs {
		switch n := procs[i].Name; {
		case strings.HasPrefix(n, "epp"), strings.HasPrefix(n, "sidecar-"), strings.HasPrefix(n, "gateway"), strings.HasPrefix(n, "sim-"):
			procs[i].Env = append(procs[i].Env, l.otlpEnv...)
		}
	}
}

// stopOTLP stops the receiver once the processes have exited (their last batch flushed).
func (l *Lab) stopOTLP() error {
	if l.otlp == nil {
		return nil
	}
	l.otlp.Close()
	return l.spans.close()
}
