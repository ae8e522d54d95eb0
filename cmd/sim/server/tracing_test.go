package server

import (
	"math"
	"testing"
	"time"

	"go.opentelemetry.io/otel/attribute"

	"github.com/pdgate/pdgate/cmd/internal/telemetry/telemetrytest"
	"github.com/pdgate/pdgate/cmd/sim/batching"
)

// vLLM's llm_request span: under the caller's traceparent, its gen_ai.latency.* attributes
// the request's intervals on the fake clock; other dialects record none.
func TestEngineRequestSpan(t *testing.T) {
	tests := []struct {
		dialect  string
		wantSpan bool
	}{
		{DialectVLLM, true},
		{DialectSGLang, false},
		{DialectTRTLLM, false},
	}
	for _, tc := range tests {
		t.Run(tc.dialect, func(t *testing.T) {
			rec := telemetrytest.New()
			clk := batching.NewFakeClock()
			in := startSim(t, clk, Options{Dialect: tc.dialect, KVCapacityTokens: 10000, Tracer: rec.Tracer})
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
			span, ok := rec.Ended()[SpanEngineRequest]
			if !tc.wantSpan {
				if ok {
					t.Fatalf("%s recorded vLLM's span", tc.dialect)
				}
				return
			}
			if !ok {
				t.Fatal("no llm_request span")
			}
			if span.Parent().TraceID().String() != telemetrytest.ClientTraceID || span.Parent().SpanID().String() != telemetrytest.ClientSpanID {
				t.Errorf("parent %v, want the caller's traceparent", span.Parent())
			}
			gen := int(field(t, r.body, "usage", "completion_tokens").(float64))
			prefill := in.prof.PrefillTime(len(prompt), 0)
			var decode time.Duration
			for g := 1; g < gen; g++ {
				decode += in.prof.DecodeStep(1, len(prompt)+g)
			}
			attrs := map[attribute.Key]attribute.Value{}
			for _, kv := range span.Attributes() {
				attrs[kv.Key] = kv.Value
			}
			want := map[string]time.Duration{AttrTimeInQueue: 0, AttrTimeInPrefill: prefill, AttrTimeInDecode: decode,
				AttrTimeInInference: prefill + decode, AttrTimeToFirstToken: prefill, AttrE2E: prefill + decode}
			for k, w := range want {
				if got := attrs[attribute.Key(k)].AsFloat64(); math.Abs(got-w.Seconds()) > 1e-9 {
					t.Errorf("%s = %v s, want %v s", k, got, w.Seconds())
				}
			}
			if attrs[AttrPromptTokens].AsInt64() != int64(len(prompt)) || attrs[AttrCompletionTokens].AsInt64() != int64(gen) || attrs[AttrRequestID].AsString() == "" {
				t.Errorf("attributes %v", attrs)
			}
		})
	}
}
