package aibrixpdpair

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

func newPlugin(t *testing.T, raw string) *Plugin {
	t.Helper()
	p, err := ParseParams(Type, "pair", []byte(raw), func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	p.Seed = 7
	return New("pair", p, nil, nil, logr.Discard())
}

func request(id string, headers map[string]string, prompt string) *fwksched.LLMRequest {
	if headers == nil {
		headers = map[string]string{}
	}
	return &fwksched.LLMRequest{RequestId: id, TargetModel: "m", Headers: headers, RequestSizeBytes: len(prompt) + 40,
		Body: &fwksched.LLMRequestBody{Completions: &fwksched.CompletionsRequest{Prompt: fwksched.Prompt{Raw: prompt}}}}
}

func TestFilterPublishesPairAndPrefillFilterFollows(t *testing.T) {
	_, eps := mkPods(
		podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"},
		podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"},
	)
	pl := newPlugin(t, `{}`)
	pf, err := PrefillFilterFactory("pf", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		cs := fwksched.NewCycleState()
		req := request(string(rune('a'+i)), nil, "hello world")
		ctx := contract.WithAnswerSlot(context.Background())
		out := pl.Filter(ctx, cs, req, eps)
		if len(out) != 1 {
			t.Fatalf("decode filter returned %d endpoints", len(out))
		}
		if a := contract.Recorded(ctx); a != nil {
			t.Fatalf("no early answer expected, got %v", a)
		}
		decode := podmodel.FromEndpoint(out[0])
		pre := pf.(*PrefillFilter).Filter(context.Background(), cs, req, eps)
		if len(pre) != 1 {
			t.Fatalf("prefill filter must return the paired prefill pod, got %v", pre)
		}
		if p := podmodel.FromEndpoint(pre[0]); p.Roleset != decode.Roleset || !p.ServesPrefill() {
			t.Fatalf("prefill filter must return the paired prefill pod, got %v", pre)
		}
		if dec := pl.Disaggregate(context.Background(), cs, req, out[0]); !dec.Run || !strings.Contains(dec.Reason, "roleset") || dec.Cause != contract.CausePaired {
			t.Fatalf("decider: %+v", dec)
		}
		if dec := pl.Disaggregate(context.Background(), fwksched.NewCycleState(), req, out[0]); dec.Run || dec.Cause != contract.CauseDecisionNotFound {
			t.Fatalf("another cycle's decision must not be found: %+v", dec)
		}
		// Response headers release the counts.
		pl.ResponseHeader(context.Background(), req, &fwkrc.Response{RequestId: req.RequestId}, nil)
	}
	if pl.Selector().Tracker.Len() != 0 {
		t.Fatalf("tracker leaked %d entries", pl.Selector().Tracker.Len())
	}
}

func TestFilterCombinedMarksSkipPrefill(t *testing.T) {
	_, eps := mkPods(podSpec{name: "p", role: "prefill", roleset: "a"},
		podSpec{name: "std", role: "all", config: bucketCfg(0, 0, true)})
	pl := newPlugin(t, `{}`)
	cs := fwksched.NewCycleState()
	decisiontrace.Start(cs) // a traced cycle (the EPP traces on request)
	req := request("r", nil, "hi")
	out := pl.Filter(context.Background(), cs, req, eps)
	if len(out) != 1 || podmodel.FromEndpoint(out[0]).Name != "std" {
		t.Fatalf("out %v", out)
	}
	if _, err := fwksched.ReadCycleStateKey[*contract.Skip](cs, contract.SkipPrefillKey); err != nil {
		t.Fatal("combined pick must mark the prefill stage skipped")
	}
	if dec := pl.Disaggregate(context.Background(), cs, req, out[0]); dec.Run || dec.Cause == contract.CausePaired {
		t.Fatalf("decider must not run prefill for a combined pick: %+v", dec)
	}
	pre := (&PrefillFilter{}).Filter(context.Background(), cs, req, eps)
	if len(pre) != 0 {
		t.Fatal("prefill filter must be empty for a combined pick")
	}
	if !strings.Contains(decisiontrace.FromCycleState(cs).Compact(), "combined-reason=") {
		t.Fatalf("trace: %s", decisiontrace.FromCycleState(cs).Compact())
	}
	pl.ResponseBody(context.Background(), req, &fwkrc.Response{EndOfStream: true}, nil)
	if pl.Selector().Tracker.Len() != 0 {
		t.Fatal("end of stream must release")
	}
}

func TestFilterImmediateAnswers(t *testing.T) {
	locked := `{"lockedRoutingStrategy":"pd","profiles":{"default":{"routingStrategy":"pd","routingConfig":{"promptLengthBucketing":true,"promptLenBucketMaxLength":10}},
	  "bad":{"routingConfig":{"decodeScorePolicy":"nope"}}}}`
	plain := `{"profiles":{"default":{"routingConfig":{"promptLenBucketMaxLength":10}},"bad":{"routingConfig":{"decodeScorePolicy":"nope"}}}}`
	tests := []struct {
		name    string
		cfg     string
		headers map[string]string
		prompt  string
		status  int
		cause   contract.Cause
		extra   bool
		mixed   bool
	}{
		{name: "no bucket and no combined → 503", cfg: locked, prompt: strings.Repeat("x", 200), status: 503, cause: contract.CauseNoBucket, extra: true},
		{name: "unknown strategy header → 400", cfg: plain, headers: map[string]string{"routing-strategy": "magic"}, status: 400, cause: contract.CauseUnknownStrategy, extra: true},
		{name: "locked strategy beats the header", cfg: locked, headers: map[string]string{"routing-strategy": "magic"}, prompt: "hi"},
		{name: "unknown decode policy in profile → 503", cfg: plain, headers: map[string]string{"config-profile": "bad"}, status: 503, cause: contract.CauseBadProfile, extra: true},
		{name: "engines disagree → 503", cfg: plain, mixed: true, status: 503, cause: contract.CauseEngineMismatch},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			specs := []podSpec{{name: "p", role: "prefill", roleset: "a", config: tt.cfg}, {name: "d", role: "decode", roleset: "a", config: tt.cfg}}
			if tt.mixed {
				specs[1].extra = map[string]string{podmodel.LabelEngine: "sglang"}
			}
			_, eps := mkPods(specs...)
			pl := newPlugin(t, `{}`)
			req := request("r", tt.headers, tt.prompt)
			ctx := contract.WithAnswerSlot(context.Background())
			out := pl.Filter(ctx, fwksched.NewCycleState(), req, eps)
			a := contract.Recorded(ctx)
			if tt.status == 0 {
				if a != nil {
					t.Fatalf("unexpected answer %v", a)
				}
				return
			}
			if a == nil || a.Status != tt.status || a.Cause != tt.cause {
				t.Fatalf("answer %+v, want %d %s", a, tt.status, tt.cause)
			}
			if len(out) != len(eps) || pl.Selector().Tracker.Len() != 0 {
				t.Fatal("a refused request passes candidates through and registers nothing")
			}
			routingErr := false
			for _, h := range a.Headers {
				routingErr = routingErr || (h.Name == "x-error-routing" && h.Value == "true")
			}
			if tt.extra != routingErr {
				t.Fatalf("headers %v", a.Headers)
			}
		})
	}
	// A request another plugin already answered (rate cap) is not placed.
	_, eps := mkPods(podSpec{name: "p", role: "prefill", roleset: "a"}, podSpec{name: "d", role: "decode", roleset: "a"})
	pl := newPlugin(t, `{}`)
	req := request("r", nil, "hi")
	ctx := contract.WithAnswerSlot(context.Background())
	contract.Record(ctx, contract.NewAnswer(429, contract.CauseRateLimited, "rate_limit_exceeded", "capped"))
	if out := pl.Filter(ctx, fwksched.NewCycleState(), req, eps); len(out) != 2 || pl.Selector().Tracker.Len() != 0 {
		t.Fatal("answered request must not be placed")
	}
}

func TestStrategies(t *testing.T) {
	heavy := podSpec{name: "std-busy", extra: map[string]string{podmodel.LabelLLMDRole: "both"}}
	light := podSpec{name: "std-idle", extra: map[string]string{podmodel.LabelLLMDRole: "both"}}
	_, eps := mkPods(podSpec{name: "p", role: "prefill", roleset: "a"}, podSpec{name: "d", role: "decode", roleset: "a"}, heavy, light)
	pl := newPlugin(t, `{"defaultRoutingStrategy":"least-request"}`)
	pl.Selector().Tracker.Register("x", "", "ns/std-busy")
	out := pl.Filter(context.Background(), fwksched.NewCycleState(), request("r", nil, "hi"), eps)
	if len(out) != 1 || podmodel.FromEndpoint(out[0]).Name != "std-idle" {
		t.Fatalf("least-request picked %v", out)
	}
	out = pl.Filter(context.Background(), fwksched.NewCycleState(), request("r2", map[string]string{"routing-strategy": "pd"}, "hi"), eps)
	if len(out) != 1 || podmodel.FromEndpoint(out[0]).Name != "d" {
		t.Fatalf("pd via header picked %v", out)
	}
	noHeader := newPlugin(t, `{"honorRoutingStrategyHeader":false}`)
	req := request("r3", map[string]string{"routing-strategy": "magic"}, "hi")
	ctx := contract.WithAnswerSlot(context.Background())
	noHeader.Filter(ctx, fwksched.NewCycleState(), req, eps)
	if contract.Recorded(ctx) != nil {
		t.Fatal("header must be ignored when not honoured")
	}
}

func TestParseParams(t *testing.T) {
	env := func(m map[string]string) func(string) (string, bool) {
		return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
	}
	tests := []struct {
		raw     string
		env     map[string]string
		wantErr string
	}{
		{raw: `{}`},
		{raw: `{"ledgerRef":"l","prefillScorePolicy":"least_request","trackerTTLSeconds":5}`},
		{raw: `{"defaultRoutingStrategy":"weird"}`, wantErr: "defaultRoutingStrategy"},
		{raw: `{"ledgerRef":""}`, wantErr: "ledgerRef"},
		{raw: `{"trackerTTLSeconds":0}`, wantErr: "trackerTTLSeconds"},
		{raw: `{"nope":1}`, wantErr: "nope"},
		{raw: `{"decodeFirst":{"weight":3,"prefillScoreBelow":3000}}`},
		{raw: `{"decodeFirst":{"weight":0,"prefillScoreBelow":3000}}`, wantErr: "decodeFirst.weight"},
		{raw: `{"decodeFirst":{"weight":3}}`, wantErr: "decodeFirst.prefillScoreBelow"},
		{raw: `{"decodeFirst":{"weight":3,"prefillScoreBelow":1,"quantile":1.5}}`, wantErr: "decodeFirst.quantile"},
		{raw: `{"decodeFirst":{"weight":3,"prefillScoreBelow":1,"quantile":0}}`},
		{raw: `{"decodeFirst":{"weight":3,"prefillScoreBelow":1,"typo":1}}`, wantErr: "typo"},
		{raw: `{"decodeScorePolicy":"x"}`, wantErr: "decodeScorePolicy"},
		{raw: `{}`, env: map[string]string{"AIBRIX_DECODE_SCORE_RATIO_THRESHOLD": "-1"}, wantErr: "decodeScoreRatioThreshold"},
		{raw: `[`, wantErr: "invalid parameters"},
	}
	for _, tt := range tests {
		_, err := ParseParams(Type, "pair", []byte(tt.raw), env(tt.env), nil)
		if tt.wantErr == "" && err != nil || tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.Contains(err.Error(), "pair")) {
			t.Errorf("%s: err %v", tt.raw, err)
		}
	}
}

func TestTrackerTTL(t *testing.T) {
	now := time.Unix(100, 0)
	tr := NewTracker(10*time.Second, func() time.Time { return now })
	tr.Register("a", "p", "d")
	now = now.Add(11 * time.Second)
	tr.Register("b", "p", "")
	if tr.PrefillCount("p") != 1 || tr.PendingDecode("d") != 0 {
		t.Fatalf("stale entry not swept: %v %v", tr.PrefillCount("p"), tr.PendingDecode("d"))
	}
	tr.Started("b")
	tr.Done("b")
	tr.Done("unknown")
	if tr.Len() != 0 || tr.PrefillCount("p") != 0 {
		t.Fatal("release must be idempotent")
	}
}

// fakeDecider is a contract.Decider answering no.
type fakeDecider struct{ name string }

func (f fakeDecider) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "fake-decider", Name: f.name}
}
func (fakeDecider) Disaggregate(context.Context, *fwksched.CycleState, *fwksched.LLMRequest, fwksched.Endpoint) contract.Decision {
	return contract.Decision{Cause: contract.CauseShortPrompt, Reason: "short"}
}

func TestPrefillDeciderRef(t *testing.T) {
	handle := fwkplugin.NewEppHandle(context.Background(), nil)
	handle.AddPlugin("decider", fakeDecider{"decider"})
	handle.AddPlugin("picker", fakeNotDecider{})
	cases := []struct{ ref, wantErr string }{
		{"", ""},
		{"decider", ""},
		{"missing", `prefillDeciderRef="missing": no plugin of that name`},
		{"picker", "is not a prefill decider"},
		{"pair", "names this plugin"},
	}
	for _, tc := range cases {
		t.Run(tc.ref, func(t *testing.T) {
			p := newPlugin(t, `{"prefillDeciderRef": "`+tc.ref+`"}`)
			err := p.ResolveReferences(handle)
			if tc.wantErr == "" {
				if err != nil || (tc.ref != "") != (p.decider != nil) {
					t.Fatalf("err %v decider %v", err, p.decider)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) || !strings.Contains(err.Error(), Type) {
				t.Fatalf("error %v, want one naming %s and %q", err, Type, tc.wantErr)
			}
		})
	}
	// Through the filter: the decider's no makes the pick decode-only and the stage skipped.
	_, eps := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	p := newPlugin(t, `{"prefillDeciderRef": "decider"}`)
	if err := p.ResolveReferences(handle); err != nil {
		t.Fatal(err)
	}
	cs := fwksched.NewCycleState()
	req := request("r", nil, "hello")
	if got := p.Filter(context.Background(), cs, req, eps); len(got) != 1 || got[0].GetMetadata().PodName != "a-d" {
		t.Fatalf("filter kept %v", got)
	}
	if dec := p.Disaggregate(context.Background(), cs, req, eps[1]); dec.Run || dec.Cause != contract.CauseShortPrompt {
		t.Fatalf("Disaggregate %+v, want the decider's no", dec)
	}
	if _, skipped := contract.ReadSkip(cs, contract.SkipPrefillKey); !skipped {
		t.Fatal("the prefill stage must be marked skipped")
	}
}

type fakeNotDecider struct{}

func (fakeNotDecider) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "max-score-picker", Name: "picker"}
}

// With seed 0 the selector's random tie-breaks follow the EPP's seed (pluginkit.WithSeed):
// two plugins built from seeded handles draw the same sequence.
func TestSeedFromHandle(t *testing.T) {
	p, err := ParseParams(Type, "pair", nil, func(string) (string, bool) { return "", false }, nil)
	if err != nil {
		t.Fatal(err)
	}
	draws := func(h fwkplugin.Handle) []int {
		s := New("pair", p, h, nil, logr.Discard()).Selector()
		out := make([]int, 20)
		for i := range out {
			out[i] = s.rng.Intn(1000)
		}
		return out
	}
	seeded := func(seed int64) fwkplugin.Handle {
		return plugintest.Handle(pluginkit.WithSeed(context.Background(), seed))
	}
	if a, b := draws(seeded(1)), draws(seeded(1)); !slices.Equal(a, b) {
		t.Fatalf("same EPP seed, different draws: %v %v", a, b)
	}
	if a, b := draws(seeded(1)), draws(seeded(2)); slices.Equal(a, b) {
		t.Fatalf("EPP seeds 1 and 2 drew the same: %v", a)
	}
}

// The decode and prefill filters answer with the paired endpoints from the published pair
// state, without a slice per request; a prefill profile whose candidates are other endpoint
// objects still gets its own object for the paired pod.
func TestFiltersAnswerFromPairState(t *testing.T) {
	_, eps := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	pl := newPlugin(t, `{}`)
	pf := &PrefillFilter{}
	cs := fwksched.NewCycleState()
	req := request("r", nil, "hello world")
	if out := pl.Filter(contract.WithAnswerSlot(context.Background()), cs, req, eps); len(out) != 1 || out[0] != eps[1] {
		t.Fatalf("decode filter answered %v, want a-d", out)
	}
	if pre := pf.Filter(context.Background(), cs, req, eps); len(pre) != 1 || pre[0] != eps[0] {
		t.Fatalf("prefill filter answered %v, want a-p", pre)
	}
	if n := testing.AllocsPerRun(100, func() { _ = pf.Filter(context.Background(), cs, req, eps) }); n != 0 {
		t.Fatalf("prefill filter allocated %v times", n)
	}
	_, others := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"})
	if pre := pf.Filter(context.Background(), cs, req, others); len(pre) != 1 || pre[0] != others[0] {
		t.Fatalf("prefill filter over other endpoint objects answered %v, want their a-p", pre)
	}
	pl.ResponseHeader(context.Background(), req, &fwkrc.Response{RequestId: req.RequestId}, nil)
}

// The pod records of a selection are reused by the next one; the published decision keeps
// copies, so a later request over another fleet leaves an earlier decision as it was.
func TestPublishedDecisionOutlivesPodRecords(t *testing.T) {
	_, first := mkPods(podSpec{name: "a-p", role: "prefill", roleset: "a"}, podSpec{name: "a-d", role: "decode", roleset: "a"})
	_, second := mkPods(podSpec{name: "b-p", role: "prefill", roleset: "b"}, podSpec{name: "b-d", role: "decode", roleset: "b"})
	pl := newPlugin(t, `{}`)
	cs := fwksched.NewCycleState()
	req := request("r1", nil, "hello world")
	pl.Filter(contract.WithAnswerSlot(context.Background()), cs, req, first)
	for i := range 3 {
		pl.Filter(contract.WithAnswerSlot(context.Background()), fwksched.NewCycleState(), request(fmt.Sprint("other", i), nil, "hi"), second)
	}
	st, err := fwksched.ReadCycleStateKey[*PairState](cs, StateKey)
	if err != nil {
		t.Fatal(err)
	}
	d := st.Decision
	if d.Decode.Key != "ns/a-d" || d.Decode.Endpoint != first[1] || d.Prefill == nil || d.Prefill.Key != "ns/a-p" ||
		d.Prefill.Endpoint != first[0] || d.Roleset != "a" || st.Decode != first[1] || st.Prefill != first[0] {
		t.Fatalf("published decision changed: %+v", st)
	}
	if dec := pl.Disaggregate(context.Background(), cs, req, first[1]); !dec.Run || !strings.Contains(dec.Reason, "ns/a-p") {
		t.Fatalf("decider: %+v", dec)
	}
}
