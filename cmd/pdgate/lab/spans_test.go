package lab

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	gwproxy "github.com/pdgate/pdgate/cmd/gateway/proxy"
	"github.com/pdgate/pdgate/cmd/pdgate/lab/otlpreceiver"
	simserver "github.com/pdgate/pdgate/cmd/sim/server"
)

func TestReadTimelines(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	span := func(trace, id, parent, svc, name string, from, to int, attrs ...string) otlpreceiver.Span {
		s := otlpreceiver.Span{TraceID: trace, SpanID: id, Parent: parent, Service: svc, Name: name, Start: at(from), End: at(to), Attrs: map[string]string{}}
		for i := 0; i+1 < len(attrs); i += 2 {
			s.Attrs[attrs[i]] = attrs[i+1]
		}
		return s
	}
	leg, phase := gwproxy.AttrLeg, extproc.AttrPhase
	// Trace b starts later than a but is written first; trace c has no gateway root (a client
	// sent its own traceparent): not a lab request.
	spans := []otlpreceiver.Span{
		span("b", "b1", "", "pdgate/gateway", gwproxy.SpanRequest, 100, 180, "pdgate.request_id", "req-b"),
		span("b", "b2", "b1", "pdgate/gateway", gwproxy.SpanRouting, 100, 102, leg, gwproxy.LegRouting),
		span("b", "b3", "b1", "pdgate/gateway", gwproxy.SpanUpstream, 103, 150, leg, gwproxy.LegUpstream),
		span("b", "b4", "b1", "pdgate/epp", extproc.SpanOrchestration, 100, 101, phase, extproc.PhaseScheduling, "pdgate.request_id", "epp-id"),
		span("b", "b5", "b4", "pdgate/sidecar", "pdgate.sidecar.prefill", 110, 140, phase, "prefill"),
		span("b", "b6", "b5", "pdgate/sim", simserver.SpanEngineRequest, 111, 139, simserver.AttrTimeInQueue, "0.004",
			simserver.AttrTimeInPrefill, "0.0235", simserver.AttrTimeInDecode, "0"),
		// d: a TensorRT-LLM generation leg and an SGLang decode leg's span trees
		span("d", "d1", "", "pdgate/gateway", gwproxy.SpanRequest, 200, 400),
		span("d", "d2", "d1", "pdgate/sidecar", "pdgate.sidecar.decode", 210, 300, phase, "decode_first_chunk"),
		span("d", "d3", "d2", "pdgate/sim", simserver.SpanEngineRequest, 211, 390, simserver.AttrTimeInQueue, "0.02",
			simserver.AttrTimeToFirstToken, "0.03", simserver.AttrKVTransferTime, "0.015", simserver.AttrE2E, "0.179"),
		span("d", "d4", "d1", "pdgate/sidecar", "pdgate.sidecar.prefill", 210, 260, phase, "prefill"),
		span("d", "d5", "d4", "pdgate/sim", simserver.SGLangRoomSpan(42), 211, 259),
		span("d", "d6", "d5", "pdgate/sim", "prefill Req 01234567", 211, 259),
		span("d", "d7", "d6", "pdgate/sim", "Scheduler [TP 0] (host:abcd | pid:1)", 211, 259),
		span("d", "d9", "d7", "pdgate/sim", simserver.StagePrefillForward, 220, 259),
		span("d", "d8", "d7", "pdgate/sim", simserver.StagePrefillWaiting, 212, 220),
		span("a", "a1", "", "pdgate/gateway", gwproxy.SpanRequest, 0, 50),
		span("a", "a2", "a1", "pdgate/epp", extproc.SpanRequest, 1, 2, "pdgate.request_id", "epp-a"),
		span("c", "c1", "x", "pdgate/sidecar", "pdgate.sidecar.request", 0, 10),
	}
	path := filepath.Join(t.TempDir(), SpansFile)
	var lines []string
	for _, s := range spans {
		b, _ := json.Marshal(s)
		lines = append(lines, string(b))
	}
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTimelines(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].TraceID != "a" || got[1].TraceID != "b" || got[2].TraceID != "d" {
		t.Fatalf("timelines %+v, want a, b then d", got)
	}
	tests := []struct {
		name           string
		tl             RequestTimeline
		id             string
		legs, phases   time.Duration
		services, text string
	}{
		{"gateway's request id wins", got[1], "req-b", 49 * time.Millisecond, 31 * time.Millisecond,
			"pdgate/epp,pdgate/gateway,pdgate/sidecar,pdgate/sim", "legs      49.0ms  = gateway_routing 2.0ms gateway_upstream 47.0ms"},
		{"the engine's split of the prefill leg", got[1], "req-b", 49 * time.Millisecond, 31 * time.Millisecond,
			"pdgate/epp,pdgate/gateway,pdgate/sidecar,pdgate/sim", "engine in prefill: queue 4.0ms prefill 23.5ms decode 0.0ms"},
		{"no client id: the EPP's", got[0], "epp-a", 0, 0, "pdgate/epp,pdgate/gateway", "phases     0.0ms  ="},
		{"TensorRT-LLM's split of the decode leg", got[2], "", 0, 140 * time.Millisecond, "pdgate/gateway,pdgate/sidecar,pdgate/sim",
			"engine in decode_first_chunk: queue 20.0ms ttft 30.0ms kv_transfer 15.0ms"},
		{"SGLang's stages of the prefill leg", got[2], "", 0, 140 * time.Millisecond, "pdgate/gateway,pdgate/sidecar,pdgate/sim",
			"engine in prefill: prefill_waiting 8.0ms prefill_forward 39.0ms"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if tc.tl.RequestID != tc.id || Sum(tc.tl.Legs) != tc.legs || Sum(tc.tl.Phases) != tc.phases || strings.Join(tc.tl.Services, ",") != tc.services {
				t.Errorf("timeline %+v", tc.tl)
			}
			// compared with runs of spaces folded: the columns' widths are not the point
			fold := func(s string) string { return strings.Join(strings.Fields(s), " ") }
			if s := tc.tl.String(); !strings.Contains(fold(s), fold(tc.text)) || !strings.Contains(s, "request "+tc.id) {
				t.Errorf("rendered:\n%s\nwant a line with %q", s, tc.text)
			}
		})
	}
	if got[1].Phases[0].Name != extproc.PhaseScheduling || got[1].Phases[1].Name != "prefill" {
		t.Errorf("phases not in start order: %+v", got[1].Phases)
	}
	if e := got[1].Engine; len(e) != 1 || e[0].Leg != "prefill" || len(e[0].Parts) != 3 || e[0].Parts[0] != (Interval{Name: "queue", Service: "pdgate/sim", D: 4 * time.Millisecond}) ||
		e[0].Parts[1].D != 23500*time.Microsecond {
		t.Errorf("engine intervals %+v", e)
	}
	if err := os.WriteFile(path, []byte("{not json\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadTimelines(path); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a malformed line: %v", err)
	}
	if _, err := ReadTimelines(filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "--otlp") {
		t.Errorf("no file: %v", err)
	}
}

// The lab reads the simulator's span by names it does not import (the CLI does not link the
// simulator); they must stay the simulator's.
func TestEngineSpanNames(t *testing.T) {
	for _, tc := range []struct{ lab, sim string }{
		{spanEngineRequest, simserver.SpanEngineRequest},
		{attrTimeInQueue, simserver.AttrTimeInQueue},
		{attrTimeInPrefill, simserver.AttrTimeInPrefill},
		{attrTimeInDecode, simserver.AttrTimeInDecode},
		{attrTimeToFirstToken, simserver.AttrTimeToFirstToken},
		{attrKVTransferTime, simserver.AttrKVTransferTime},
		{sglangRoomPrefix, simserver.SGLangRoomSpan(0)[:len(sglangRoomPrefix)]},
	} {
		if tc.lab != tc.sim {
			t.Errorf("lab reads %q, the simulator writes %q", tc.lab, tc.sim)
		}
	}
}
