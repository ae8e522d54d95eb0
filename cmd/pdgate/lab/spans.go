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
	// Engine are the engines' own request intervals, one per leg, named by the sidecar phase
	// whose leg carried the request: vLLM's and TensorRT-LLM's llm_request span, SGLang's
	// bootstrap-room span tree (the simulator records each in its engine's shape).
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

// The engines' request spans and their interval attributes, as the engines and the simulator
// record them (cmd/sim/server/tracing.go and tracing_sglang.go; TestEngineSpanNames keeps the
// two in step without linking the simulator into the CLI).
const (
	spanEngineRequest    = "llm_request"
	attrTimeInQueue      = "gen_ai.latency.time_in_queue"
	attrTimeInPrefill    = "gen_ai.latency.time_in_model_prefill"
	attrTimeInDecode     = "gen_ai.latency.time_in_model_decode"
	attrTimeToFirstToken = "gen_ai.latency.time_to_first_token"
	attrKVTransferTime   = "gen_ai.latency.kv_cache_transfer_time"
	sglangRoomPrefix     = "Bootstrap Room 0x"
)

// EngineIntervals is one engine's split of a leg: vLLM's queue, prefill and decode
// (time_in_queue, time_in_model_prefill, _decode); TensorRT-LLM's queue (arrival to first
// scheduled), TTFT and KV transfer; SGLang's stage slices in start order.
type EngineIntervals struct {
	Leg   string
	Parts []Interval
}

// engineIntervals reads an llm_request span's attributes in the order vLLM's and
// TensorRT-LLM's spans carry them, leaving out the ones the span does not carry.
func engineIntervals(s otlpreceiver.Span) []Interval {
	var parts []Interval
	for _, a := range []struct{ name, key string }{{"queue", attrTimeInQueue}, {"prefill", attrTimeInPrefill},
		{"decode", attrTimeInDecode}, {"ttft", attrTimeToFirstToken}, {"kv_transfer", attrKVTransferTime}} {
		if v, ok := s.Attrs[a.key]; ok {
			if a.name == "ttft" && s.Attrs[attrTimeInPrefill] != "" {
				continue // vLLM's TTFT is its queue plus prefill
			}
			parts = append(parts, Interval{Name: a.name, Service: s.Service, D: seconds(v)})
		}
	}
	return parts
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
		switch {
		case s.Name == spanEngineRequest:
			t.Engine = append(t.Engine, EngineIntervals{Leg: byID[s.Parent].Attrs[extproc.AttrPhase], Parts: engineIntervals(s)})
		case strings.HasPrefix(s.Name, sglangRoomPrefix):
			t.Engine = append(t.Engine, EngineIntervals{Leg: byID[s.Parent].Attrs[extproc.AttrPhase], Parts: sglangSlices(s, spans, byID)})
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
		fmt.Fprintf(&b, "  engine  in %s:", leg)
		for _, p := range e.Parts {
			fmt.Fprintf(&b, " %s %s", p.Name, ms(p.D))
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// sglangSlices are the stage slices under an SGLang room span (room, request, thread, slice),
// in start order.
func sglangSlices(room otlpreceiver.Span, spans []otlpreceiver.Span, byID map[string]otlpreceiver.Span) []Interval {
	var out []Interval
	for _, s := range spans {
		thread := byID[s.Parent]
		if req := byID[thread.Parent]; thread.SpanID != "" && req.SpanID != "" && req.Parent == room.SpanID {
			out = append(out, Interval{Name: s.Name, Service: s.Service, Start: s.Start, D: s.Duration()})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Start.Before(out[j].Start) })
	return out
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
