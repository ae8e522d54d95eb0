package otel

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	gwproxy "github.com/pdgate/pdgate/cmd/gateway/proxy"
	scproxy "github.com/pdgate/pdgate/cmd/sidecar/proxy"
	simserver "github.com/pdgate/pdgate/cmd/sim/server"
)

// engineLeg is what an engine's own spans say of one leg the sidecar sent it: when the
// request reached the engine, when its first token was ready and when the engine was done.
type engineLeg struct {
	span                     span // the engine's top span, a child of the sidecar's leg span
	arrival, first, finished time.Time
}

// engineLegs reads each leg's engine spans in the engine's own shape, keyed by the sidecar
// phase of the leg span they hang under: vLLM's and TensorRT-LLM's llm_request (its start,
// start plus gen_ai.latency.time_to_first_token, its end), or SGLang's bootstrap-room tree (the
// room span's start, the end of the leg's forward slice, the room span's end).
func engineLegs(spans []span) (map[string]engineLeg, error) {
	byID := map[string]span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	under := func(s span, ancestor string) bool {
		for p, n := s.Parent, 0; p != "" && n < 8; p, n = byID[p].Parent, n+1 {
			if p == ancestor {
				return true
			}
		}
		return false
	}
	out := map[string]engineLeg{}
	for _, s := range spans {
		leg := byID[s.Parent]
		if leg.Name != scproxy.SpanPrefill && leg.Name != scproxy.SpanDecode {
			continue
		}
		phase := leg.Attrs[extproc.AttrPhase]
		switch {
		case s.Name == simserver.SpanEngineRequest:
			ttft, err := strconv.ParseFloat(s.Attrs[simserver.AttrTimeToFirstToken], 64)
			if err != nil {
				return nil, fmt.Errorf("%s under %s: %s %q: %w", s.Name, phase, simserver.AttrTimeToFirstToken, s.Attrs[simserver.AttrTimeToFirstToken], err)
			}
			out[phase] = engineLeg{span: s, arrival: s.Start, first: s.Start.Add(time.Duration(ttft * float64(time.Second))), finished: s.End}
		case strings.HasPrefix(s.Name, "Bootstrap Room 0x"):
			forward := simserver.StagePrefillForward
			if phase == scproxy.PhaseDecodeFirstChunk {
				forward = simserver.StageDecodeForward
			}
			e := engineLeg{span: s, arrival: s.Start, finished: s.End}
			for _, sl := range spans {
				if sl.Name == forward && under(sl, s.SpanID) {
					e.first = sl.End
				}
			}
			if e.first.IsZero() {
				return nil, fmt.Errorf("SGLang's spans under %s have no %s slice", phase, forward)
			}
			out[phase] = e
		}
	}
	return out, nil
}

// explainedTTFT adds up what each process timed on the request's critical path to its first
// byte: the EPP's queue and scheduling, the sidecar's setup, the engines' own intervals (on a
// sequential handoff the prefill engine's whole answer, the sidecar's handoff and the decode
// engine's wait, transfer, queue and first step; where the prefill runs alongside the decode,
// only the decode engine's, which waits for the prefill's KV) and the gateway's response leg.
// What it leaves out is the transit between processes.
func explainedTTFT(spans []span, sequential bool) (time.Duration, error) {
	legs, err := engineLegs(spans)
	if err != nil {
		return 0, err
	}
	decode, ok := legs[scproxy.PhaseDecodeFirstChunk]
	if !ok {
		return 0, fmt.Errorf("no engine spans under the decode leg")
	}
	d := decode.first.Sub(decode.arrival)
	counted := map[string]bool{extproc.PhaseQueue: true, extproc.PhaseScheduling: true, scproxy.PhaseSetup: true, gwproxy.PhaseResponse: true}
	if sequential {
		prefill, ok := legs[scproxy.PhasePrefill]
		if !ok {
			return 0, fmt.Errorf("no engine spans under the prefill leg")
		}
		d += prefill.finished.Sub(prefill.arrival)
		counted[scproxy.PhaseHandoff] = true
	}
	for _, s := range spans {
		if counted[s.Attrs[extproc.AttrPhase]] {
			d += s.Duration()
		}
	}
	return d, nil
}
