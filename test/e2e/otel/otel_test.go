// Package otel checks the per-request phase timeline end to end, for each engine the simulator
// speaks: real gateway, EPP, sidecar and simulator processes (a lab of one prefill and one
// decode pod) export their spans over OTLP gRPC to a real TraceService endpoint in the test.
// Every process's spans, the engines' own included, must arrive under the one trace the
// gateway started, with the right parents; the gateway's legs must add up to the TTFT the
// client measured, with each process's phases inside the leg that waits for them; and the
// phases plus the engines' own intervals (queue, prefill, KV transfer, first decode step) must
// add up to it too.
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

// phases are every phase span the path records (SGLang's concurrent legs have no handoff); on
// a sequential P/D request they tile the time from the gateway's arrival to its first byte
// out, but for the hops between processes (which the gateway's legs include).
var phases = []string{extproc.PhaseQueue, extproc.PhaseScheduling, scproxy.PhaseSetup, scproxy.PhasePrefill,
	scproxy.PhaseHandoff, scproxy.PhaseDecodeFirstChunk, gwproxy.PhaseResponse}

// engines are the labs the timeline is checked on: one prefill and one decode pod of each
// engine, on subnets of their own. sequential is a handoff in which the decode leg is sent
// once the prefill has answered (vLLM's NIXL, TensorRT-LLM's context_first); SGLang sends both
// legs at once, and its decode waits for the prefill's KV.
var engines = []struct {
	name, subnet, pods string
	sequential         bool
}{
	{"vllm", "127.0.58", `- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}`, true},
	{"sglang", "127.0.97", `- {name: prefill-a, role: prefill, roleset: rs-a, engine: sglang}
- {name: decode-a, role: decode, roleset: rs-a, engine: sglang}`, false},
	{"trtllm", "127.0.98", `- {name: prefill-a, role: prefill, roleset: rs-a, engine: trtllm}
- {name: decode-a, role: decode, roleset: rs-a, engine: trtllm, trtScheduleStyle: context_first}`, true},
}

func TestPhaseTimeline(t *testing.T) {
	for _, e := range engines {
		t.Run(e.name, func(t *testing.T) { phaseTimeline(t, e.name, e.subnet, e.pods, e.sequential) })
	}
}

func phaseTimeline(t *testing.T, engine, subnet, pods string, sequential bool) {
	rcv := startReceiver(t)
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", rcv.Endpoint())
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "200") // ms: spans reach the receiver soon after each request
	cfg := filepath.Join(repoRoot, "config")
	topo := labtest.WriteTopology(t, `name: otel-`+engine+`
eppConfig: `+cfg+`/lab/epp/pd-always.yaml
simProfile: `+cfg+`/sim/llama3-8b-h100.yaml
timeScale: 1
model: `+model+`
pods:
`+pods+`
`)
	l := labtest.Start(t, lab.Options{Topology: topo, BinDir: binDir, Subnet: subnet})

	// ~12,000 prompt tokens: a prefill of about 400 ms, so that the hops between processes that
	// no phase covers (loopback, well under 1 ms) and a goroutine descheduled for a few
	// milliseconds on a busy CI machine stay inside 2 % of the TTFT. With 3,000 tokens (~100 ms)
	// one CI run, packages side by side on two cores, had 2 of 100 requests at 2.4 %.
	prompt := strings.Repeat("the quick brown fox jumps over the lazy dog ", 1320)
	ttft := map[string]time.Duration{}
	for i := range requests {
		id := fmt.Sprintf("otel-e2e-%s-%03d", engine, i)
		ttft[id] = firstByte(t, l.URL, id, fmt.Sprintf("%d %s", i, prompt))
	}

	legsWithin, phasesWithin, engineWithin := 0, 0, 0
	var off, farOff, engineOff []string
	var coverage, engineCoverage []float64
	for i := range requests {
		id := fmt.Sprintf("otel-e2e-%s-%03d", engine, i)
		spans := waitComplete(t, rcv, id, sequential)
		checkParents(t, id, spans, sequential)
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
		explained, err := explainedTTFT(spans, sequential)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		if within(explained, ttft[id], 0.02) {
			engineWithin++
		}
		if explained > ttft[id] {
			engineOff = append(engineOff, fmt.Sprintf("%s: ttft %v, explained %v", id, ttft[id], explained))
		}
		engineCoverage = append(engineCoverage, float64(explained)/float64(ttft[id]))
	}
	sort.Float64s(coverage)
	sort.Float64s(engineCoverage)
	// The phases alone leave out the hops between processes (ext_proc and HTTP on loopback);
	// the gateway's legs include them. Both are reported; the legs must explain the TTFT.
	// (Where the legs run side by side the sidecar's prefill and decode phases overlap, and
	// the phases alone add up to more than the TTFT.)
	t.Logf("%s: gateway legs within 2%% of the client's TTFT: %d of %d; phases alone: %d of %d (phases cover %.1f%% of TTFT at the median, %.1f%% at the 5th percentile)",
		engine, legsWithin, requests, phasesWithin, requests, 100*coverage[len(coverage)/2], 100*coverage[len(coverage)/20])
	t.Logf("%s: phases with the engines' own queue, prefill, KV transfer and first step within 2%% of TTFT: %d of %d (%.1f%% of TTFT at the median, %.1f%% at the 5th percentile, %.1f%% at the 95th)",
		engine, engineWithin, requests, 100*engineCoverage[len(engineCoverage)/2], 100*engineCoverage[len(engineCoverage)/20],
		100*engineCoverage[len(engineCoverage)*19/20])
	if legsWithin*100 < 99*requests || len(farOff) > 0 {
		t.Errorf("%d of %d requests have legs within 2%% of TTFT (99 needed); off: %v; more than 10%% off: %v",
			legsWithin, requests, off, farOff)
	}
	// The engines' intervals and the phases on the critical path never add up to more than
	// the client waited (nothing is counted twice), and they explain the typical request's
	// TTFT: what they leave out is the transit between processes, which the legs include.
	if len(engineOff) > 0 || engineCoverage[len(engineCoverage)/2] < 0.98 {
		t.Errorf("the phases and the engines' intervals cover %.1f%% of TTFT at the median (98%% needed); more than the TTFT: %v",
			100*engineCoverage[len(engineCoverage)/2], engineOff)
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
// them (the EPP's in routing, the sidecar's in upstream) and that each engine's spans start
// inside the sidecar leg that sent them.
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
	// Each engine's spans start (the request reaching the engine) inside the sidecar's leg
	// that sent it: the sidecar, the engine and the test share the host's clock.
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	legs, err := engineLegs(spans)
	if err != nil {
		t.Errorf("%s: %v", id, err)
	}
	for phase, e := range legs {
		l := byID[e.span.Parent]
		if e.arrival.Before(l.Start) || e.arrival.After(l.End) || e.first.Before(e.arrival) {
			t.Errorf("%s: the engine's %s under the %s leg [%v, %v] arrived at %v, first token %v", id, e.span.Name, phase,
				l.Start, l.End, e.arrival, e.first)
		}
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

// waitComplete waits for every span of a request; on a timeout it names the spans that came.
func waitComplete(t *testing.T, rcv receiver, id string, sequential bool) []span {
	t.Helper()
	var spans []span
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(testsupport.PollInterval) {
		if spans = rcv.trace(id); complete(spans, sequential) {
			return spans
		}
		if time.Now().After(deadline) {
			var got []string
			for _, s := range spans {
				got = append(got, fmt.Sprintf("%s (%s, parent %s: %s)", s.Name, s.SpanID, s.Parent, s.Service))
			}
			_, err := engineLegs(spans)
			t.Fatalf("timed out after 15s waiting for every span of %s; engine spans: %v; got %d: %v", id, err, len(spans), got)
		}
	}
}

// complete reports whether every process's spans of a request have arrived: one of each
// phase (no handoff where the legs run side by side), the request spans of the gateway, the
// EPP and the sidecar, and the engines' spans under both legs.
func complete(spans []span, sequential bool) bool {
	seen := map[string]bool{}
	for _, s := range spans {
		seen[s.Name] = true
		if p := s.Attrs[extproc.AttrPhase]; p != "" {
			seen["phase:"+p] = true
		}
	}
	for _, p := range phases {
		if !seen["phase:"+p] && (sequential || p != scproxy.PhaseHandoff) {
			return false
		}
	}
	for _, l := range []string{gwproxy.SpanRouting, gwproxy.SpanForward, gwproxy.SpanUpstream} {
		if !seen[l] {
			return false
		}
	}
	if !seen[spanGateway] || !seen[extproc.SpanRequest] || !seen[extproc.SpanOrchestration] || !seen[scproxy.SpanRequest] {
		return false
	}
	legs, err := engineLegs(spans)
	_, prefill := legs[scproxy.PhasePrefill]
	_, decode := legs[scproxy.PhaseDecodeFirstChunk]
	return err == nil && prefill && decode
}

// checkParents checks the trace's shape: the gateway's span is the root (the client sent no
// traceparent), the EPP's request span is its child, the sidecar's is the EPP's, and each
// process's phase spans hang under its own request span.
func checkParents(t *testing.T, id string, spans []span, sequential bool) {
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
	if !sequential {
		delete(parentOf, scproxy.SpanHandoff) // the legs run side by side: no handoff
	}
	for child, parent := range parentOf {
		if by[child].Parent != by[parent].SpanID {
			t.Errorf("%s: %s has parent %s, want %s (%s)", id, child, by[child].Parent, parent, by[parent].SpanID)
		}
	}
}
