// Package otel checks the per-request phase timeline end to end: real gateway, EPP, sidecar
// and simulator processes (a lab of one vLLM prefill and one decode pod, NIXL handoff) export
// their spans over OTLP gRPC to a real TraceService endpoint in the test. Every process's
// spans must arrive under the one trace the gateway started, with the right parents, and the
// gateway's legs must add up to the TTFT the client measured, with each process's phases
// inside the leg that waits for them.
package otel

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	gwproxy "github.com/pdgate/pdgate/cmd/gateway/proxy"
	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	scproxy "github.com/pdgate/pdgate/cmd/sidecar/proxy"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

var binDir, repoRoot string

func TestMain(m *testing.M) {
	testsupport.Main(m, "otel-e2e", &binDir, &repoRoot, "sim", "sidecar", "epp", "gateway")
}

const (
	model       = "meta-llama/Llama-3.1-8B-Instruct"
	spanGateway = gwproxy.SpanRequest
	requests    = 100
)

// phases are every phase span the path records; on a sequential P/D request they tile the
// time from the gateway's arrival to its first byte out, but for the hops between processes
// (which the gateway's legs include).
var phases = []string{extproc.PhaseQueue, extproc.PhaseScheduling, scproxy.PhaseSetup, scproxy.PhasePrefill,
	scproxy.PhaseHandoff, scproxy.PhaseDecodeFirstChunk, gwproxy.PhaseResponse}

func TestPhaseTimeline(t *testing.T) {
	rcv := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200") // ms: spans reach the receiver soon after each request
	cfg := filepath.Join(repoRoot, "config")
	topo := labtest.WriteTopology(t, `name: otel
eppConfig: `+cfg+`/lab/epp/pd-always.yaml
simProfile: `+cfg+`/sim/llama3-8b-h100.yaml
timeScale: 1
model: `+model+`
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
`)
	l := labtest.Start(t, lab.Options{Topology: topo, BinDir: binDir, Subnet: "127.0.58"})

	// ~12,000 prompt tokens: a prefill of about 400 ms, so that the hops between processes that
	// no phase covers (loopback, well under 1 ms) and a goroutine descheduled for a few
	// milliseconds on a busy CI machine stay inside 2 % of the TTFT. With 3,000 tokens (~100 ms)
	// one CI run, packages side by side on two cores, had 2 of 100 requests at 2.4 %.
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 1320)
	ttft := map[string]time.Duration{}
	for i := range requests {
		id := fmt.Sprintf("otel-e2e-%03d", i)
		ttft[id] = firstByte(t, l.URL, id, fmt.Sprintf("%d %s", i, prompt))
	}

	legsWithin, phasesWithin := 0, 0
	var off, farOff []string
	var coverage []float64
	for i := range requests {
		id := fmt.Sprintf("otel-e2e-%03d", i)
		var spans []span
		testsupport.Eventually(t, 15*time.Second, "every span of "+id, func() bool {
			spans = rcv.trace(id)
			return complete(spans)
		})
		checkParents(t, id, spans)
		checkNesting(t, id, spans)
		legs, fine := sum(spans, gwproxy.AttrLeg), sum(spans, extproc.AttrPhase)
		if within(legs, ttft[id], 0.02) {
			legsWithin++
		} else {
			off = append(off, fmt.Sprintf("%s: ttft %v, legs %v", id, ttft[id], legs))
		}
		if !within(legs, ttft[id], 0.10) {
			farOff = append(farOff, id)
		}
		if within(fine, ttft[id], 0.02) {
			phasesWithin++
		}
		coverage = append(coverage, float64(fine)/float64(ttft[id]))
	}
	sort.Float64s(coverage)
	// The phases alone leave out the hops between processes (ext_proc and HTTP on loopback);
	// the gateway's legs include them. Both are reported; the legs must explain the TTFT.
	t.Logf("gateway legs within 2%% of the client's TTFT: %d of %d; phases alone: %d of %d (phases cover %.1f%% of TTFT at the median, %.1f%% at the 5th percentile)",
		legsWithin, requests, phasesWithin, requests, 100*coverage[len(coverage)/2], 100*coverage[len(coverage)/20])
	if legsWithin*100 < 99*requests || len(farOff) > 0 {
		t.Fatalf("%d of %d requests have legs within 2%% of TTFT (99 needed); off: %v; more than 10%% off: %v",
			legsWithin, requests, off, farOff)
	}
}

// sum adds up the durations of the spans that carry attr.
func sum(spans []span, attr string) time.Duration {
	var d time.Duration
	for _, s := range spans {
		if s.Attrs[attr] != "" {
			d += s.Duration()
		}
	}
	return d
}

// within reports whether d is within the fraction frac of ttft.
func within(d, ttft time.Duration, frac float64) bool {
	return float64((ttft - d).Abs()) <= frac*float64(ttft)
}

// checkNesting checks that each process's phases lie inside the gateway leg that waits for
// them: the EPP's in routing, the sidecar's in upstream.
func checkNesting(t *testing.T, id string, spans []span) {
	t.Helper()
	leg := map[string]span{}
	for _, s := range spans {
		if l := s.Attrs[gwproxy.AttrLeg]; l != "" {
			leg[l] = s
		}
	}
	inside := map[string]string{
		extproc.PhaseQueue: gwproxy.LegRouting, extproc.PhaseScheduling: gwproxy.LegRouting,
		scproxy.PhaseSetup: gwproxy.LegUpstream, scproxy.PhasePrefill: gwproxy.LegUpstream,
		scproxy.PhaseHandoff: gwproxy.LegUpstream, scproxy.PhaseDecodeFirstChunk: gwproxy.LegUpstream,
	}
	for _, s := range spans {
		l, ok := inside[s.Attrs[extproc.AttrPhase]]
		if !ok {
			continue
		}
		if s.Start.Before(leg[l].Start) || s.End.After(leg[l].End) {
			t.Errorf("%s: phase %s [%v, %v] is not inside the gateway's %s leg [%v, %v]", id,
				s.Attrs[extproc.AttrPhase], s.Start, s.End, l, leg[l].Start, leg[l].End)
		}
	}
}

// firstByte sends one streamed completion through the gateway and returns the time to its
// first body byte (the client's TTFT); it reads the rest.
func firstByte(t *testing.T, url, id, prompt string) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := testsupport.JSONRequest(ctx, url+"/v1/completions", map[string]string{"X-Request-Id": id},
		map[string]any{"model": model, "prompt": prompt, "max_tokens": 4, "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = resp.Body.Close() }()
	var b [1]byte
	if _, err := io.ReadFull(resp.Body, b[:]); err != nil {
		t.Fatalf("%s: reading the first byte: %v", id, err)
	}
	d := time.Since(start)
	rest, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d: %s", id, resp.StatusCode, rest)
	}
	return d
}

// complete reports whether every process's spans of a request have arrived: one of each
// phase and the request spans of the gateway, the EPP and the sidecar.
func complete(spans []span) bool {
	seen := map[string]bool{}
	for _, s := range spans {
		seen[s.Name] = true
		if p := s.Attrs[extproc.AttrPhase]; p != "" {
			seen["phase:"+p] = true
		}
	}
	for _, p := range phases {
		if !seen["phase:"+p] {
			return false
		}
	}
	for _, l := range []string{gwproxy.SpanRouting, gwproxy.SpanForward, gwproxy.SpanUpstream} {
		if !seen[l] {
			return false
		}
	}
	return seen[spanGateway] && seen[extproc.SpanRequest] && seen[extproc.SpanOrchestration] && seen[scproxy.SpanRequest]
}

// checkParents checks the trace's shape: the gateway's span is the root (the client sent no
// traceparent), the EPP's request span is its child, the sidecar's is the EPP's, and each
// process's phase spans hang under its own request span.
func checkParents(t *testing.T, id string, spans []span) {
	t.Helper()
	by := map[string]span{}
	for _, s := range spans {
		by[s.Name] = s
	}
	services := map[string]string{spanGateway: "pdgate/gateway", extproc.SpanRequest: "pdgate/epp", scproxy.SpanRequest: "pdgate/sidecar"}
	for name, svc := range services {
		if by[name].Service != svc {
			t.Errorf("%s: span %s from service %q, want %q", id, name, by[name].Service, svc)
		}
	}
	if by[spanGateway].Parent != "" {
		t.Errorf("%s: the gateway's span has parent %s; the client sent no traceparent", id, by[spanGateway].Parent)
	}
	parentOf := map[string]string{
		extproc.SpanRequest:       spanGateway,
		gwproxy.SpanResponse:      spanGateway,
		gwproxy.SpanRouting:       spanGateway,
		gwproxy.SpanForward:       spanGateway,
		gwproxy.SpanUpstream:      spanGateway,
		extproc.SpanQueue:         extproc.SpanRequest,
		extproc.SpanOrchestration: extproc.SpanRequest,
		scproxy.SpanRequest:       extproc.SpanRequest,
		scproxy.SpanSetup:         scproxy.SpanRequest,
		scproxy.SpanPrefill:       scproxy.SpanRequest,
		scproxy.SpanHandoff:       scproxy.SpanRequest,
		scproxy.SpanDecode:        scproxy.SpanRequest,
	}
	for child, parent := range parentOf {
		if by[child].Parent != by[parent].SpanID {
			t.Errorf("%s: %s has parent %s, want %s (%s)", id, child, by[child].Parent, parent, by[parent].SpanID)
		}
	}
}
