package server

import (
	"math"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// Each dialect's engine spans for a request that prefills and decodes on one server: under
// the caller's traceparent, in the engine's shape, their intervals the request's on the fake
// clock (queue 0, prefill the cost model's, decode the sum of its steps).
func TestEngineRequestSpan(t *testing.T) {
	for _, dialect := range []string{DialectVLLM, DialectSGLang, DialectTRTLLM} {
		t.Run(dialect, func(t *testing.T) {
			rec := telemetrytest.New()
			clk := batching.NewFakeClock()
			in := startSim(t, clk, Options{Dialect: dialect, KVCapacityTokens: 10000, Tracer: rec.Tracer})
			prompt := seqTokens(1, 300)
			done := make(chan result, 1)
			go func() {
				done <- post(t, "http://"+in.Addr()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 5},
					map[string]string{"traceparent": telemetrytest.ClientTraceparent})
			}()
			for n := 0; in.sched.Stats().Running == 0; n++ {
				if n > 50000 {
					t.Fatal("request never reached the scheduler")
				}
				waitABit()
			}
			for d, ok := clk.NextIn(); ok; d, ok = clk.NextIn() {
				clk.Advance(d)
			}
			r := <-done
			if r.status != 200 {
				t.Fatalf("%d %s", r.status, r.raw)
			}
			gen := int(field(t, r.body, "usage", "completion_tokens").(float64))
			prefill := in.prof.PrefillTime(len(prompt), 0)
			var decode time.Duration
			for g := 1; g < gen; g++ {
				decode += in.prof.DecodeStep(1, len(prompt)+g)
			}
			ended := rec.Ended()
			if dialect == DialectSGLang {
				checkSGLangTree(t, ended, "", map[string]time.Duration{StageRequestProcess: 0, StagePrefillWaiting: 0,
					StagePrefillForward: prefill, StageDecodeLoop: decode})
				if _, ok := ended[SpanEngineRequest]; ok {
					t.Error("SGLang recorded vLLM's llm_request span")
				}
				return
			}
			span := llmRequest(t, ended)
			want := map[string]time.Duration{AttrTimeInQueue: 0, AttrTimeToFirstToken: prefill, AttrE2E: prefill + decode}
			if dialect == DialectVLLM {
				want[AttrTimeInPrefill], want[AttrTimeInDecode], want[AttrTimeInInference] = prefill, decode, prefill+decode
			}
			attrs := checkSeconds(t, span, want)
			if attrs[AttrPromptTokens].AsInt64() != int64(len(prompt)) || attrs[AttrCompletionTokens].AsInt64() != int64(gen) || attrs[AttrRequestID].AsString() == "" {
				t.Errorf("attributes %v", attrs)
			}
			if dialect == DialectTRTLLM {
				// TensorRT-LLM has no model-time intervals of vLLM's, and no transfer on this leg
				for _, k := range []string{AttrTimeInPrefill, AttrTimeInDecode, AttrTimeInInference, AttrKVTransferTime} {
					if _, ok := attrs[attribute.Key(k)]; ok {
						t.Errorf("TensorRT-LLM's span carries %s", k)
					}
				}
				if got, want := attrs[AttrFinishReasons].AsString(), `["`+field(t, r.body, "choices", 0, "finish_reason").(string)+`"]`; got != want {
					t.Errorf("%s = %q, want %q", AttrFinishReasons, got, want)
				}
			}
		})
	}
}

// A decode leg's engine spans show the KV transfer: TensorRT-LLM's kv_cache_transfer_time
// attribute and events, SGLang's decode_transferred slice, each the cost model's transfer time
// for the pulled prompt.
func TestEngineSpansOnDecodeLeg(t *testing.T) {
	prompt := seqTokens(1, 300)
	t.Run(DialectTRTLLM, func(t *testing.T) {
		clk := newPump(t)
		rec := telemetrytest.New()
		ctxS := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RolePrefill, KVWaitTimeout: Duration{2 * time.Second}})
		gen := startSim(t, clk, Options{Dialect: DialectTRTLLM, Role: RoleDecode, KVWaitTimeout: Duration{2 * time.Second}, Tracer: rec.Tracer})
		cr := post(t, "http://"+ctxS.Addr()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 1,
			"disaggregated_params": map[string]any{"request_type": "context_only", "disagg_request_id": 4398046511104}}, nil)
		if cr.status != 200 {
			t.Fatalf("context leg: %d %s", cr.status, cr.raw)
		}
		dp := mergeMaps(field(t, cr.body, "choices", 0, "disaggregated_params").(map[string]any), map[string]any{"request_type": "generation_only"})
		if r := post(t, "http://"+gen.Addr()+"/v1/completions", map[string]any{"prompt": prompt, "max_tokens": 4, "disaggregated_params": dp},
			map[string]string{"traceparent": telemetrytest.ClientTraceparent}); r.status != 200 {
			t.Fatalf("generation leg: %d %s", r.status, r.raw)
		}
		span := llmRequest(t, rec.Ended())
		transfer := gen.prof.KVTransferTime(len(prompt))
		checkSeconds(t, span, map[string]time.Duration{AttrKVTransferTime: transfer})
		var events []string
		for _, e := range span.Events() {
			events = append(events, e.Name)
		}
		if len(events) != 2 || events[0] != EventKVTransferStart || events[1] != EventKVTransferFinish ||
			span.Events()[1].Time.Sub(span.Events()[0].Time) != transfer {
			t.Errorf("events %v (%v), want the transfer's start and end %v apart", events, span.Events(), transfer)
		}
	})
	t.Run(DialectSGLang, func(t *testing.T) {
		clk := newPump(t)
		rec := telemetrytest.New()
		p := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RolePrefill, KVWaitTimeout: Duration{2 * time.Second}})
		d := startSim(t, clk, Options{Dialect: DialectSGLang, Role: RoleDecode, KVWaitTimeout: Duration{2 * time.Second}, Tracer: rec.Tracer})
		body := func(maxTokens int) map[string]any {
			return mergeMaps(bootstrap(p, 0x2a), map[string]any{"prompt": prompt, "max_tokens": maxTokens, "rid": "pdgate_0123456789abcdef"})
		}
		if r := post(t, "http://"+p.Addr()+"/v1/completions", body(1), nil); r.status != 200 {
			t.Fatalf("prefill leg: %d %s", r.status, r.raw)
		}
		if r := post(t, "http://"+d.Addr()+"/v1/completions", body(4), map[string]string{"traceparent": telemetrytest.ClientTraceparent}); r.status != 200 {
			t.Fatalf("decode leg: %d %s", r.status, r.raw)
		}
		ended := rec.Ended()
		checkSGLangTree(t, ended, "decode", map[string]time.Duration{StageDecodeTransferred: d.prof.KVTransferTime(len(prompt)), StageDecodeWaiting: 0})
		if got := ended[SGLangRoomSpan(0x2a)].Name(); got != "Bootstrap Room 0x2a" {
			t.Errorf("room span %q", got)
		}
		if _, ok := ended["decode Req 01234567"]; !ok {
			t.Errorf("no request span named by the rid after its last underscore: %v", names(ended))
		}
		if _, ok := ended[StageDecodeForward]; !ok {
			t.Errorf("no %s slice: %v", StageDecodeForward, names(ended))
		}
	})
}

// llmRequest returns the llm_request span, checking that it is a server span under the
// caller's traceparent.
func llmRequest(t *testing.T, ended map[string]sdktrace.ReadOnlySpan) sdktrace.ReadOnlySpan {
	t.Helper()
	span, ok := ended[SpanEngineRequest]
	if !ok {
		t.Fatalf("no %s span: %v", SpanEngineRequest, names(ended))
	}
	if span.Parent().TraceID().String() != telemetrytest.ClientTraceID || span.Parent().SpanID().String() != telemetrytest.ClientSpanID {
		t.Errorf("parent %v, want the caller's traceparent", span.Parent())
	}
	return span
}

// checkSeconds checks the span's attributes in seconds and returns them all.
func checkSeconds(t *testing.T, span sdktrace.ReadOnlySpan, want map[string]time.Duration) map[attribute.Key]attribute.Value {
	t.Helper()
	attrs := map[attribute.Key]attribute.Value{}
	for _, kv := range span.Attributes() {
		attrs[kv.Key] = kv.Value
	}
	for k, w := range want {
		v, ok := attrs[attribute.Key(k)]
		if got := v.AsFloat64(); !ok || math.Abs(got-w.Seconds()) > 1e-9 {
			t.Errorf("%s = %v s (present %v), want %v s", k, got, ok, w.Seconds())
		}
	}
	return attrs
}

// checkSGLangTree checks SGLang's span tree: the room span under the caller's traceparent,
// the request span under it, the scheduler thread's span under that and each stage slice
// under the thread, each slice as long as want says.
func checkSGLangTree(t *testing.T, ended map[string]sdktrace.ReadOnlySpan, mode string, want map[string]time.Duration) {
	t.Helper()
	var room, req, thread sdktrace.ReadOnlySpan
	for name, s := range ended {
		switch {
		case strings.HasPrefix(name, "Bootstrap Room 0x"):
			room = s
		case strings.HasPrefix(name, mode+" Req "):
			req = s
		case strings.HasPrefix(name, SGLangThreadLabel+" [TP 0] (host:"):
			thread = s
		}
	}
	if room == nil || req == nil || thread == nil {
		t.Fatalf("room, request and thread spans: %v", names(ended))
	}
	if room.Parent().TraceID().String() != telemetrytest.ClientTraceID || room.Parent().SpanID().String() != telemetrytest.ClientSpanID {
		t.Errorf("room span's parent %v, want the caller's traceparent", room.Parent())
	}
	if req.Parent().SpanID() != room.SpanContext().SpanID() || thread.Parent().SpanID() != req.SpanContext().SpanID() {
		t.Errorf("request span under %v (room %v), thread under %v (request %v)", req.Parent().SpanID(), room.SpanContext().SpanID(),
			thread.Parent().SpanID(), req.SpanContext().SpanID())
	}
	for stage, d := range want {
		s, ok := ended[stage]
		switch {
		case !ok:
			t.Errorf("no %s slice: %v", stage, names(ended))
		case s.Parent().SpanID() != thread.SpanContext().SpanID():
			t.Errorf("%s is not under the thread span", stage)
		case s.EndTime().Sub(s.StartTime()) != d:
			t.Errorf("%s lasted %v, want %v", stage, s.EndTime().Sub(s.StartTime()), d)
		}
	}
}

func names(ended map[string]sdktrace.ReadOnlySpan) []string {
	var out []string
	for n := range ended {
		out = append(out, n)
	}
	return out
}
