package prefixdecider

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"sigs.k8s.io/controller-runtime/pkg/log"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	attrprefix "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/plugins/datalayer/attribute/prefix"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

// wrongType is a Cloneable that is not PrefixCacheMatchInfo.
type wrongType struct{}

func (wrongType) Clone() fwkdl.Cloneable { return wrongType{} }

func endpoint(match, block int, withInfo bool) fwksched.Endpoint {
	e := eptest.Scheduling(eptest.Spec{Name: "decode-0", Address: "10.0.0.2", Port: "8000"})
	if withInfo {
		e.Put(attrprefix.PrefixCacheMatchInfoKey, attrprefix.NewPrefixCacheMatchInfo(match, 100, block))
	}
	return e
}

func tokens(n int) *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r", TargetModel: "m", Headers: map[string]string{},
		TokenizedPrompt: &fwksched.TokenizedPrompt{TokenIDs: make([]uint32, n)}}
}

func TestParameters(t *testing.T) {
	tests := []struct {
		params  string
		want    Parameters
		wantErr string
	}{
		{params: ``, want: Parameters{}},
		{params: `null`, want: Parameters{}},
		{params: `{"nonCachedTokens":0}`, want: Parameters{}},
		{params: `{"nonCachedTokens":512}`, want: Parameters{NonCachedTokens: 512}},
		{params: `{"nonCachedTokens":512,"promptTokens":1024}`, want: Parameters{NonCachedTokens: 512, PromptTokens: 1024}},
		{params: `{"nonCachedTokens":-1}`, wantErr: "failed to create prefix-based-pd-decider plugin: nonCachedTokens parameter of prefix disaggregation decider cannot be negative"},
		{params: `{"promptTokens":-1}`, wantErr: "promptTokens parameter of prefix disaggregation decider cannot be negative"},
		{params: `{"nonCachedTokens":"x"}`, wantErr: `prefix-based-pd-decider "d": invalid parameters: `},
		{params: `{"nonCachedToken":5}`, wantErr: `unknown field "nonCachedToken"`},
	}
	for _, tt := range tests {
		t.Run(tt.params, func(t *testing.T) {
			p, err := Factory("d", json.RawMessage(tt.params), nil)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if p.(*Decider).Params() != tt.want {
				t.Fatalf("%+v %v", p, err)
			}
		})
	}
}

func TestDisaggregate(t *testing.T) {
	tests := []struct {
		name            string
		threshold, gate int
		req             *fwksched.LLMRequest
		ep              fwksched.Endpoint
		want            bool
	}{
		{name: "threshold 0 disables", threshold: 0, req: tokens(1000), ep: endpoint(0, 16, true), want: false},
		{name: "threshold 0 and nil endpoint", threshold: 0, req: tokens(1000), ep: nil, want: false},
		{name: "nil endpoint", threshold: 10, req: tokens(1000), ep: nil, want: false},
		{name: "input shorter than threshold", threshold: 100, req: tokens(99), ep: endpoint(0, 16, true), want: false},
		{name: "suffix below threshold", threshold: 100, req: tokens(200), ep: endpoint(7, 16, true), want: false},    // 200-112=88
		{name: "suffix equals threshold", threshold: 100, req: tokens(212), ep: endpoint(7, 16, true), want: true},    // 212-112=100
		{name: "suffix above threshold", threshold: 100, req: tokens(300), ep: endpoint(7, 16, true), want: true},     // 188
		{name: "fully cached", threshold: 100, req: tokens(320), ep: endpoint(20, 16, true), want: false},             // 0
		{name: "cache longer than prompt", threshold: 100, req: tokens(100), ep: endpoint(20, 16, true), want: false}, // clamped 0
		{name: "no hit", threshold: 100, req: tokens(150), ep: endpoint(0, 16, true), want: true},
		{name: "no prefix info → fail open", threshold: 100, req: tokens(1000), ep: endpoint(0, 16, false), want: false},
		{name: "promptTokens gate blocks short prompt", threshold: 100, gate: 500, req: tokens(400), ep: endpoint(0, 16, true), want: false},
		{name: "promptTokens gate passes long prompt", threshold: 100, gate: 500, req: tokens(500), ep: endpoint(0, 16, true), want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New("d", Parameters{NonCachedTokens: tt.threshold, PromptTokens: tt.gate})
			dec := d.Disaggregate(context.Background(), nil, tt.req, tt.ep)
			got, reason := dec.Run, dec.Reason
			if got != tt.want || reason == "" {
				t.Fatalf("Disaggregate = %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
	wrong := endpoint(0, 16, false)
	wrong.Put(attrprefix.PrefixCacheMatchInfoKey, wrongType{})
	if dec := New("d", Parameters{NonCachedTokens: 1}).Disaggregate(context.Background(), nil, tokens(100), wrong); dec.Run || !strings.Contains(dec.Reason, "wrong type") || dec.Cause != contract.CauseNoPrefixInfo {
		t.Fatalf("wrong attribute type: %+v", dec)
	}
}

func TestShouldRejectConditionalDecode(t *testing.T) {
	tests := []struct {
		name      string
		threshold int
		gate      int
		req       *fwksched.LLMRequest
		ep        fwksched.Endpoint
		want      bool
	}{
		{name: "threshold 0 disables the gate", threshold: 0, req: tokens(1000), ep: nil, want: false},
		{name: "below threshold forwards", threshold: 5, req: tokens(10), ep: endpoint(1, 8, true), want: false}, // 2
		{name: "at threshold rejects", threshold: 5, req: tokens(13), ep: endpoint(1, 8, true), want: true},      // 5
		{name: "no hit rejects", threshold: 5, req: tokens(10), ep: endpoint(0, 8, true), want: true},
		{name: "fully cached forwards", threshold: 5, req: tokens(16), ep: endpoint(2, 8, true), want: false},
		{name: "missing prefix info rejects (fail closed)", threshold: 5, req: tokens(10), ep: endpoint(0, 8, false), want: true},
		{name: "nil endpoint rejects", threshold: 5, req: tokens(10), ep: nil, want: true},
		{name: "short prompt under promptTokens forwards", threshold: 5, gate: 100, req: tokens(10), ep: endpoint(0, 8, true), want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New("d", Parameters{NonCachedTokens: tt.threshold, PromptTokens: tt.gate})
			if got, reason := d.ShouldRejectConditionalDecode(context.Background(), tt.req, tt.ep); got != tt.want || reason == "" {
				t.Fatalf("reject = %v (%s), want %v", got, reason, tt.want)
			}
		})
	}
}

// Director-level cases of llm-d PR #1684 (inputTokens 10, threshold 5). The EPP's request
// path calls the gate only for Prefer: if-available requests (cmd/epp/extproc tests that part).
func TestConditionalDecodeGate(t *testing.T) {
	tests := []struct {
		name string
		ep   fwksched.Endpoint
		want bool // 412
	}{
		{name: "cached 8 forwards", ep: endpoint(1, 8, true), want: false},
		{name: "cached 5 → 412", ep: endpoint(1, 5, true), want: true},
		{name: "cached 0 → 412", ep: endpoint(0, 8, true), want: true},
		{name: "no info → 412 (fail closed)", ep: endpoint(0, 8, false), want: true},
		{name: "no decode endpoint → 412", ep: nil, want: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := New("d", Parameters{NonCachedTokens: 5})
			r := tokens(10)
			r.Headers["Prefer"] = "if-available"
			if got := d.CheckConditionalDecode(context.Background(), r, tt.ep); got != tt.want {
				t.Fatalf("412=%v want %v", got, tt.want)
			}
		})
	}
}

func TestFirstConfiguredGateWins(t *testing.T) {
	h := plugintest.Handle(context.Background())
	first, err := Factory("first", json.RawMessage(`{"nonCachedTokens":5}`), h)
	if err != nil {
		t.Fatal(err)
	}
	h.AddPlugin("first", first)
	second, _ := Factory("second", json.RawMessage(`{"nonCachedTokens":5000}`), h)
	h.AddPlugin("second", second)
	if !first.(*Decider).IsConditionalDecodeGate() || second.(*Decider).IsConditionalDecodeGate() {
		t.Fatal("the first configured decider must be the only gate")
	}
	// The decider declares what it reads; the EPP adds the producers after loading
	// (cmd/epp/pluginset TestResolveReferencesAddsDefaultProducers).
	for _, key := range []string{attrprefix.PrefixCacheMatchInfoKey, contract.TokenizedPromptKey} {
		if _, ok := first.(*Decider).Consumes()[key]; !ok {
			t.Fatalf("Consumes() lacks %s", key)
		}
	}
}

func TestGateMetric(t *testing.T) {
	for _, tt := range []struct {
		model, outcome string
		threshold      int
		ep             fwksched.Endpoint
	}{
		{"gm-fwd", OutcomeForwarded, 5, endpoint(2, 8, true)},
		{"gm-rej", OutcomeRejected, 5, endpoint(0, 8, true)},
		{"gm-off", OutcomeDisabled, 0, endpoint(0, 8, true)},
	} {
		r := tokens(10)
		r.TargetModel = tt.model
		r.Headers["prefer"] = "if-available"
		d := New("d", Parameters{NonCachedTokens: tt.threshold}) // its own counter: no process-global state
		d.CheckConditionalDecode(context.Background(), r, tt.ep)
		if v := testutil.ToFloat64(d.outcomes.WithLabelValues(tt.model, tt.outcome)); v != 1 {
			t.Fatalf("%s %s = %v", tt.model, tt.outcome, v)
		}
	}
}

func TestPromptTokenCountFallsBackToEstimate(t *testing.T) {
	r := &fwksched.LLMRequest{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: strings.Repeat("a", 41)}}}}
	if n, err := PromptTokenCount(r); err != nil || n != 11 {
		t.Fatalf("n=%d err=%v", n, err)
	}
	if _, err := PromptTokenCount(&fwksched.LLMRequest{}); err == nil {
		t.Fatal("want error for a request without a body")
	}
}

func FuzzParseParameters(f *testing.F) {
	for _, s := range []string{``, `{"nonCachedTokens":5}`, `{"nonCachedTokens":-1}`, `{"promptTokens":1e9}`, `null`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParameters("test", json.RawMessage(s))
		if err == nil && (p.NonCachedTokens < 0 || p.PromptTokens < 0) {
			t.Fatalf("accepted negative thresholds: %+v", p)
		}
	})
}

// The specification calls a missing PrefixCacheMatchInfo an error log (fail open): it is
// logged at error level, not only at a debug verbosity.
func TestMissingPrefixInfoIsAnErrorLog(t *testing.T) {
	var errs []string
	logger := funcr.New(func(prefix, args string) {}, funcr.Options{})
	logger = logr.New(&errorSink{LogSink: logger.GetSink(), errs: &errs})
	ctx := log.IntoContext(context.Background(), logger)
	dec := New("d", Parameters{NonCachedTokens: 1}).Disaggregate(ctx, nil, tokens(100), endpoint(0, 16, false))
	if dec.Run || dec.Cause != contract.CauseNoPrefixInfo || len(errs) != 1 || !strings.Contains(errs[0], "prefix cache match information missing") {
		t.Fatalf("decision %+v, error logs %q", dec, errs)
	}
}

// errorSink records the messages of Error calls.
type errorSink struct {
	logr.LogSink
	errs *[]string
}

func (s *errorSink) Error(err error, msg string, kv ...any) {
	*s.errs = append(*s.errs, msg)
	s.LogSink.Error(err, msg, kv...)
}

func (s *errorSink) WithValues(kv ...any) logr.LogSink {
	return &errorSink{LogSink: s.LogSink.WithValues(kv...), errs: s.errs}
}

func (s *errorSink) WithName(name string) logr.LogSink {
	return &errorSink{LogSink: s.LogSink.WithName(name), errs: s.errs}
}

// TestDecodeOnlyAtAdmissionAgreesWithTheCount: the shortcut that skips estimating long prompts
// answers what counting them would, for prompts around the threshold.
func TestDecodeOnlyAtAdmissionAgreesWithTheCount(t *testing.T) {
	d := New("p", Parameters{NonCachedTokens: 16})
	for n := 0; n <= 100; n++ {
		for _, req := range []*fwksched.LLMRequest{
			{Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: strings.Repeat("a", n)}}}},
			{Body: &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: []fwksched.Message{
				{Role: "system", Content: fwksched.Content{Raw: strings.Repeat("b", n/2)}}, {Role: "user", Content: fwksched.Content{Raw: strings.Repeat("c", n)}}}}}},
		} {
			count, err := PromptTokenCount(req)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := d.DecodeOnlyAtAdmission(req), count < 16; got != want {
				t.Fatalf("%d bytes: decode-only %v, counting %d tokens says %v", n, got, count, want)
			}
		}
	}
}
