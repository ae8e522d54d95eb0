package lab

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	gwproxy "github.com/pdgate/pdgate/cmd/gateway/proxy"
	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
)

// RequestTimeline is one request's phase timeline, read back from the lab's span file: the
// gateway's legs, which tile the time to its first byte out, and the phases each process
// timed inside them (docs/operations.md, "Spans").
type RequestTimeline struct {
	TraceID   string
	RequestID string
	Start     time.Time
	Legs      []Interval
	Phases    []Interval
	// Engine are the engines' own request intervals (a vLLM simulator's llm_request span),
	// one per leg, named by the sidecar phase whose leg carried the request.
	Engine []EngineIntervals
	// Services are the processes whose spans the trace holds.
	Services []string
}

// Interval is one leg or phase.
type Interval struct {
	Name    string
	Service string
	Start   time.Time
	D       time.Duration
}

// vLLM's request span and its interval attributes, as vLLM and the simulator record them
// (cmd/sim/server/tracing.go; TestEngineSpanNames keeps the two in step without linking the
// simulator into the CLI).
const (
	spanEngineRequest = "llm_request"
	attrTimeInQueue   = "gen_ai.latency.time_in_queue"
	attrTimeInPrefill = "gen_ai.latency.time_in_model_prefill"
	attrTimeInDecode  = "gen_ai.latency.time_in_model_decode"
)

// EngineIntervals is one engine's llm_request span: its queue and compute inside a leg.
type EngineIntervals struct {
	Leg                    string
	Queue, Prefill, Decode time.Duration
}

// ReadTimelines groups a span file's spans into the requests the gateway started (traces
// whose root is the gateway's request span), oldest first.
func ReadTimelines(path string) ([]RequestTimeline, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("no span file (%w); start the lab with --otlp", err)
	}
	defer f.Close()
	traces := map[string][]otlpreceiver.Span{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 4<<20)
	for n := 1; sc.Scan(); n++ {
		var s otlpreceiver.Span
		if err := json.Unmarshal(sc.Bytes(), &s); err != nil {
			return nil, fmt.Errorf("%s line %d: %w", path, n, err)
		}
		traces[s.TraceID] = append(traces[s.TraceID], s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var out []RequestTimeline
	for id, spans := range traces {
		if t, ok := timeline(id, spans); ok {
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out, nil
}

func timeline(traceID string, spans []otlpreceiver.Span) (RequestTimeline, bool) {
	t := RequestTimeline{TraceID: traceID}
	root := false
	services := map[string]bool{}
	byID := map[string]otlpreceiver.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	for _, s := range spans {
		if s.Name == spanEngineRequest {
			t.Engine = append(t.Engine, EngineIntervals{Leg: byID[s.Parent].Attrs[extproc.AttrPhase],
				Queue: seconds(s.Attrs[attrTimeInQueue]), Prefill: seconds(s.Attrs[attrTimeInPrefill]),
				Decode: seconds(s.Attrs[attrTimeInDecode])})
		}
		services[s.Service] = true
		if s.Name == gwproxy.SpanRequest && s.Parent == "" {
			root, t.Start = true, s.Start
		}
		if id := s.Attrs["pdgate.request_id"]; id != "" && (t.RequestID == "" || s.Name == gwproxy.SpanRequest) {
			t.RequestID = id
		}
		iv := Interval{Service: s.Service, Start: s.Start, D: s.Duration()}
		if leg := s.Attrs[gwproxy.AttrLeg]; leg != "" {
			iv.Name = leg
			t.Legs = append(t.Legs, iv)
		}
		if phase := s.Attrs[extproc.AttrPhase]; phase != "" {
			iv.Name = phase
			t.Phases = append(t.Phases, iv)
		}
	}
	for s := range services {
		t.Services = append(t.Services, s)
	}
	sort.Strings(t.Services)
	byStart := func(ivs []Interval) {
		sort.SliceStable(ivs, func(i, j int) bool { return ivs[i].Start.Before(ivs[j].Start) })
	}
	byStart(t.Legs)
	byStart(t.Phases)
	return t, root
}

// Sum adds the intervals up.
func Sum(ivs []Interval) time.Duration {
	var d time.Duration
	for _, iv := range ivs {
		d += iv.D
	}
	return d
}

// String renders the timeline for people: the legs (their sum is the gateway's time to its
// first byte) and the phases, in start order.
func (t RequestTimeline) String() string {
	var b strings.Builder
	id := t.RequestID
	if id == "" {
		id = "(no request id)"
	}
	fmt.Fprintf(&b, "request %s  trace %s  %s\n", id, t.TraceID, t.Start.Format("15:04:05.000"))
	list := func(label string, ivs []Interval) {
		fmt.Fprintf(&b, "  %-7s %9s  =", label, ms(Sum(ivs)))
		for _, iv := range ivs {
			fmt.Fprintf(&b, " %s %s", iv.Name, ms(iv.D))
		}
		b.WriteByte('\n')
	}
	list("legs", t.Legs)
	list("phases", t.Phases)
	for _, e := range t.Engine {
		leg := e.Leg
		if leg == "" {
			leg = "(leg unknown)"
		}
		fmt.Fprintf(&b, "  engine  in %s: queue %s prefill %s decode %s\n", leg, ms(e.Queue), ms(e.Prefill), ms(e.Decode))
	}
	return b.String()
}

// seconds reads a gen_ai.latency.* attribute (seconds, written as text); absent is 0.
func seconds(v string) time.Duration {
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		return 0
	}
	return time.Duration(f * float64(time.Second))
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
