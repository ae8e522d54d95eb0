package disaggprofile

import (
	"context"
	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	"github.com/prometheus/client_golang/prometheus/testutil"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func req() *fwksched.LLMRequest {
	return &fwksched.LLMRequest{RequestId: "r1", TargetModel: "m", Headers: map[string]string{}}
}

func resultsOf(kv ...any) map[string]*fwksched.ProfileRunResult {
	m := map[string]*fwksched.ProfileRunResult{}
	for i := 0; i < len(kv); i += 2 {
		r, _ := kv[i+1].(*fwksched.ProfileRunResult)
		m[kv[i].(string)] = r
	}
	return m
}

var (
	dEp  = ep("decode-0", "10.0.0.2", "8000", map[string]string{podmodel.LabelLLMDRole: "decode"})
	pEp  = ep("prefill-0", "10.0.0.1", "8000", map[string]string{podmodel.LabelLLMDRole: "prefill"})
	eEp1 = ep("encode-0", "10.0.0.5", "8000", map[string]string{podmodel.LabelLLMDRole: "encode"})
	eEp2 = ep("encode-1", "10.0.0.6", "8001", map[string]string{podmodel.LabelLLMDRole: "encode"})
	cEp  = ep("combined-0", "10.0.0.9", "8000", map[string]string{podmodel.LabelLLMDRole: "prefill-decode"})
)

func defaults() Parameters {
	return Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}
}

func TestPickSequence(t *testing.T) {
	type step struct {
		results map[string]*fwksched.ProfileRunResult
		want    string // comma list of profiles returned, "" for done
	}
	tests := []struct {
		name     string
		profiles []string
		prefill  *fakeDecider
		encode   *fakeDecider
		steps    []step
		// after the last step: expected results map entries that are nil (skipped)
		wantSkipped []string
	}{
		{name: "decode not run → run decode", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf(), "decode"}}},
		{name: "decode failed → done", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", nil), ""}}},
		{name: "decode empty → done", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res()), ""}}},
		{name: "decider approves → run prefill", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp)), "prefill"}}},
		{name: "decider declines → skip prefill", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{},
			steps: []step{{resultsOf("decode", res(dEp)), ""}}, wantSkipped: []string{"prefill"}},
		{name: "all done → done", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp), "prefill", res(pEp)), ""}}},
		{name: "prefill profile missing → decider never called", profiles: []string{"decode"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp)), ""}}},
		{name: "prefill profile without decider → skipped", profiles: []string{"decode", "prefill"},
			steps: []step{{resultsOf("decode", res(dEp)), ""}}, wantSkipped: []string{"prefill"}},
		{name: "EPD: no multimodal → skip encode, no prefill decider", profiles: []string{"decode", "encode"}, encode: &fakeDecider{},
			steps: []step{{resultsOf("decode", res(dEp)), ""}}, wantSkipped: []string{"encode"}},
		{name: "EPD: multimodal → run encode", profiles: []string{"decode", "encode"}, encode: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp)), "encode"}}},
		{name: "EPD: encode failed → done", profiles: []string{"decode", "encode"}, encode: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp), "encode", nil), ""}}},
		{name: "E/P/D: multimodal → encode next, then prefill", profiles: []string{"decode", "encode", "prefill"},
			encode: &fakeDecider{yes: true}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp)), "encode"}, {resultsOf("decode", res(dEp), "encode", res(eEp1)), "prefill"},
				{resultsOf("decode", res(dEp), "encode", res(eEp1), "prefill", res(pEp)), ""}}},
		{name: "E/P/D: text-only high uncached → skip encode, run prefill", profiles: []string{"decode", "encode", "prefill"},
			encode: &fakeDecider{}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp)), "prefill"}}, wantSkipped: []string{"encode"}},
		{name: "E/P/D: text-only, no prefill → done", profiles: []string{"decode", "encode", "prefill"},
			encode: &fakeDecider{}, prefill: &fakeDecider{},
			steps: []step{{resultsOf("decode", res(dEp)), ""}}, wantSkipped: []string{"encode", "prefill"}},
		{name: "E/P/D: encode failed → fall through to prefill", profiles: []string{"decode", "encode", "prefill"},
			encode: &fakeDecider{yes: true}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(dEp), "encode", nil), "prefill"}}},
		{name: "combined decode pick → no prefill", profiles: []string{"decode", "prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf("decode", res(cEp)), ""}}, wantSkipped: []string{"prefill"}},
		{name: "decode profile not configured → nothing", profiles: []string{"prefill"}, prefill: &fakeDecider{yes: true},
			steps: []step{{resultsOf(), ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var pd, ed contract.Decider
			if tt.prefill != nil {
				pd = tt.prefill
			}
			if tt.encode != nil {
				ed = tt.encode
			}
			h := NewHandler("h", defaults(), pd, ed)
			cs := fwksched.NewCycleState()
			var last map[string]*fwksched.ProfileRunResult
			for i, s := range tt.steps {
				got := h.Pick(context.Background(), cs, req(), eptest.Profiles(tt.profiles...), s.results)
				if strings.Join(keys(got), ",") != s.want {
					t.Fatalf("step %d: Pick = %v, want %q", i, keys(got), s.want)
				}
				last = s.results
			}
			for _, name := range tt.wantSkipped {
				if r, ok := last[name]; !ok || r != nil {
					t.Fatalf("%s not marked skipped: %v", name, last)
				}
			}
		})
	}
}

// The decider is asked once per cycle: a skip is remembered in the results map.
func TestPickDoesNotReaskDecider(t *testing.T) {
	d := &fakeDecider{}
	h := NewHandler("h", defaults(), d, nil)
	cs := fwksched.NewCycleState()
	results := resultsOf("decode", res(dEp))
	for i := 0; i < 3; i++ {
		h.Pick(context.Background(), cs, req(), eptest.Profiles("decode", "prefill"), results)
	}
	if d.calls != 1 {
		t.Fatalf("decider asked %d times", d.calls)
	}
}

func TestPickNilDeciders(t *testing.T) {
	for _, profiles := range [][]string{{"decode"}, {"decode", "prefill"}, {"decode", "encode"}, {"decode", "encode", "prefill"}} {
		for _, decoded := range []bool{false, true} {
			h := NewHandler("h", defaults(), nil, nil)
			results := resultsOf()
			if decoded {
				results = resultsOf("decode", res(dEp))
			}
			got := h.Pick(context.Background(), fwksched.NewCycleState(), req(), eptest.Profiles(profiles...), results)
			want := "decode"
			if decoded {
				want = ""
			}
			if strings.Join(keys(got), ",") != want {
				t.Fatalf("profiles %v decoded=%v: Pick = %v", profiles, decoded, keys(got))
			}
		}
	}
	if got := NewHandler("h", defaults(), nil, nil).Pick(context.Background(), nil, nil, eptest.Profiles("decode"), resultsOf()); len(got) != 0 {
		t.Fatal("nil request must pick nothing")
	}
}

func TestSkipMarkerAndDecodeResultPublished(t *testing.T) {
	d := &fakeDecider{yes: true}
	h := NewHandler("h", defaults(), d, nil)
	cs := fwksched.NewCycleState()
	decisiontrace.Start(cs)
	// A decode-profile plugin (e.g. a combined-pod picker) asks to skip prefill.
	contract.MarkSkipPrefill(cs, "combined pod picked by aibrix overflow")
	got := h.Pick(context.Background(), cs, req(), eptest.Profiles("decode", "prefill"), resultsOf("decode", res(dEp)))
	if len(got) != 0 || d.calls != 0 {
		t.Fatalf("skip marker ignored: %v calls=%d", keys(got), d.calls)
	}
	dr, ok := contract.DecodeResult(cs)
	if !ok || dr.First() != dEp || dr.Profile != "decode" {
		t.Fatalf("decode result not published: %+v", dr)
	}
	tr := decisiontrace.FromCycleState(cs)
	if !strings.Contains(tr.Compact(), "prefill-skipped=skip marker in cycle state: combined pod") {
		t.Fatalf("trace: %s", tr.Compact())
	}
}

func TestCombinedSkipDisabled(t *testing.T) {
	p := defaults()
	p.CombinedDecodeSkipsPrefill = false
	h := NewHandler("h", p, &fakeDecider{yes: true}, nil)
	got := h.Pick(context.Background(), fwksched.NewCycleState(), req(), eptest.Profiles("decode", "prefill"), resultsOf("decode", res(cEp)))
	if _, ok := got["prefill"]; !ok {
		t.Fatalf("llm-d behaviour: a prefill-decode decode pick may still get a remote prefill; got %v", keys(got))
	}
}

// Prefill-first: prefill runs first and its pick is published before decode runs. The
// decider, when there is one, is asked once, after decode; llm-d's prefill-first has none, and
// the request is then P/D unless the prefill profile found nothing.
func TestPrefillFirst(t *testing.T) {
	p := defaults()
	p.StageOrder = PrefillFirst
	tests := []struct {
		name       string
		decider    *fakeDecider // nil: no decider
		prefillRes *fwksched.ProfileRunResult
		wantUsed   bool
		// skipped: a decode-profile plugin marks prefill skipped (handoff-compat-filter when no
		// decode pod can take the prefill pick's KV).
		skipped bool
	}{
		{"approved and found", &fakeDecider{yes: true}, res(pEp), true, false},
		{"declined after decode → dropped", &fakeDecider{yes: false}, res(pEp), false, false},
		{"approved but prefill found nothing", &fakeDecider{yes: true}, nil, false, false},
		{"no decider, prefill found", nil, res(pEp), true, false},
		{"no decider, prefill found nothing", nil, nil, false, false},
		{"no decider, prefill found, then marked skipped", nil, res(pEp), false, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var d contract.Decider
			if tt.decider != nil {
				d = tt.decider
			}
			h := NewHandler("h", p, d, nil)
			cs := fwksched.NewCycleState()
			profiles := eptest.Profiles("decode", "prefill")
			results := resultsOf()
			if got := h.Pick(context.Background(), cs, req(), profiles, results); strings.Join(keys(got), ",") != "prefill" {
				t.Fatalf("first pick = %v", keys(got))
			}
			results["prefill"] = tt.prefillRes
			if got := h.Pick(context.Background(), cs, req(), profiles, results); strings.Join(keys(got), ",") != "decode" {
				t.Fatalf("second pick = %v", keys(got))
			}
			if pr, ok := contract.PrefillResult(cs); ok != (tt.prefillRes != nil) || ok && pr.First() != pEp {
				t.Fatalf("prefill pick published before decode = %v, want %v", ok, tt.prefillRes != nil)
			}
			results["decode"] = res(dEp)
			if tt.skipped {
				contract.MarkSkipPrefill(cs, "no decode pod can take the prefill pick's KV")
			}
			if got := h.Pick(context.Background(), cs, req(), profiles, results); len(got) != 0 {
				t.Fatalf("third pick = %v", keys(got))
			}
			out, err := h.ProcessResults(context.Background(), cs, req(), results)
			if err != nil {
				t.Fatal(err)
			}
			if _, used := out.ProfileResults["prefill"]; used != tt.wantUsed {
				t.Fatalf("prefill used=%v want %v", used, tt.wantUsed)
			}
			if tt.decider != nil && tt.decider.calls != 1 {
				t.Fatalf("decider asked %d times, want once", tt.decider.calls)
			}
		})
	}
}

func TestProcessResults(t *testing.T) {
	tests := []struct {
		name    string
		pf      Profiles
		results map[string]*fwksched.ProfileRunResult
		wantErr string
		want    []string
	}{
		{name: "decode failed", pf: defaults().Profiles, results: resultsOf("decode", nil), wantErr: "failed to find available decode workers"},
		{name: "decode missing", pf: defaults().Profiles, results: resultsOf(), wantErr: "failed to find available decode workers"},
		{name: "decode only", pf: defaults().Profiles, results: resultsOf("decode", res(dEp), "prefill", nil), want: []string{"decode"}},
		{name: "decode + prefill", pf: defaults().Profiles, results: resultsOf("decode", res(dEp), "prefill", res(pEp)), want: []string{"decode", "prefill"}},
		{name: "encode nil omitted", pf: defaults().Profiles, results: resultsOf("decode", res(dEp), "encode", nil, "prefill", res(pEp)), want: []string{"decode", "prefill"}},
		{name: "full EPD", pf: defaults().Profiles, results: resultsOf("decode", res(dEp), "encode", res(eEp1), "prefill", res(pEp)), want: []string{"decode", "encode", "prefill"}},
		{name: "custom names", pf: Profiles{"my-d", "my-p", "my-e"}, results: resultsOf("my-d", res(dEp), "my-p", res(pEp)), want: []string{"my-d", "my-p"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := defaults()
			p.Profiles = tt.pf
			out, err := NewHandler("h", p, nil, nil).ProcessResults(context.Background(), nil, req(), tt.results)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if out.PrimaryProfileName != tt.pf.Decode || len(out.ProfileResults) != len(tt.want) {
				t.Fatalf("out %+v err %v", out, err)
			}
			for _, n := range tt.want {
				if out.ProfileResults[n] == nil {
					t.Fatalf("%s missing", n)
				}
			}
		})
	}
	if _, err := NewHandler("h", defaults(), nil, nil).ProcessResults(context.Background(), nil, nil, resultsOf()); err == nil || err.Error() != "request is nil" {
		t.Fatalf("nil request: %v", err)
	}
}

func TestDecisionMetric(t *testing.T) {
	tests := []struct {
		name     string
		enc, pre bool
		want     string
	}{
		{"decode-only", false, false, DecisionDecodeOnly},
		{"prefill-decode", false, true, DecisionPrefillDecode},
		{"encode-decode", true, false, DecisionEncodeDecode},
		{"encode-prefill-decode", true, true, DecisionEncodePrefillDecode},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			model := "metric-" + tt.name
			h := NewHandler("h", defaults(), &fakeDecider{yes: tt.pre}, &fakeDecider{yes: tt.enc})
			cs := fwksched.NewCycleState()
			r := &fwksched.LLMRequest{RequestId: "x", TargetModel: model}
			results := resultsOf("decode", res(dEp))
			profiles := eptest.Profiles("decode", "encode", "prefill")
			for i := 0; i < 4; i++ {
				next := h.Pick(context.Background(), cs, r, profiles, results)
				if len(next) == 0 {
					break
				}
				for n := range next {
					results[n] = res(map[string]fwksched.Endpoint{"encode": eEp1, "prefill": pEp}[n])
				}
			}
			h.Pick(context.Background(), cs, r, profiles, results)                            // a repeated final call must not double count
			if v := testutil.ToFloat64(h.decisions.WithLabelValues(model, tt.want)); v != 1 { // the handler's own counter
				t.Fatalf("%s = %v", tt.want, v)
			}
		})
	}
	if DecisionType(false, false) != "decode-only" || modelLabel("") != "unknown" {
		t.Fatal("labels")
	}
}

func TestPreRequestHeaders(t *testing.T) {
	h := NewHandler("h", defaults(), nil, nil)
	r := req()
	r.Headers[protocol.HeaderPrefillerHostPort] = "6.6.6.6:1"
	r.Headers["X-Encoder-Hosts-Ports"] = "6.6.6.6:2"
	h.PreRequest(context.Background(), r, &fwksched.SchedulingResult{PrimaryProfileName: "decode",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"decode": res(dEp), "prefill": res(pEp), "encode": res(eEp1, eEp2)}})
	if r.Headers[protocol.HeaderPrefillerHostPort] != "10.0.0.1:8000" || r.Headers[protocol.HeaderEncoderHostsPorts] != "10.0.0.5:8000,10.0.0.6:8001" {
		t.Fatalf("headers %v", r.Headers)
	}
	if _, spoof := r.Headers["X-Encoder-Hosts-Ports"]; spoof {
		t.Fatal("differently-cased spoofed header survived")
	}
	h.PreRequest(context.Background(), r, &fwksched.SchedulingResult{PrimaryProfileName: "decode",
		ProfileResults: map[string]*fwksched.ProfileRunResult{"decode": res(dEp)}})
	if _, ok := r.Headers[protocol.HeaderPrefillerHostPort]; ok {
		t.Fatal("stale prefill header kept")
	}
	h.PreRequest(context.Background(), nil, nil) // no panic
}

// TestNoDecodeEndpointIs503 checks both handlers answer a decode profile that found nothing
// with a typed 503 (GIE would have mapped the error to 429).
func TestNoDecodeEndpointIs503(t *testing.T) {
	empty := resultsOf("decode", nil)
	for name, process := range map[string]func() error{
		HandlerType: func() error {
			_, err := NewHandler("h", defaults(), nil, nil).ProcessResults(context.Background(), fwksched.NewCycleState(), req(), empty)
			return err
		},
		PDHandlerType: func() error {
			_, err := newPD(t, "", nil).ProcessResults(context.Background(), fwksched.NewCycleState(), req(), empty)
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			a, ok := contract.AnswerOf(process())
			if !ok || a.Status != 503 || a.Cause != contract.CauseNoDecodeEndpoint {
				t.Fatalf("answer %+v, want 503 %s", a, contract.CauseNoDecodeEndpoint)
			}
		})
	}
}

func TestCheckProfiles(t *testing.T) {
	tests := []struct {
		name       string
		configured []string
		wantDecode string
		wantErr    string
	}{
		{"decode exists", []string{"decode", "prefill"}, "decode", ""},
		{"only profile serves as decode (llm-d decode-only example)", []string{"default"}, "default", ""},
		{"several profiles, none decode", []string{"a", "b"}, "", `decode profile "decode" is not configured (scheduling profiles: a, b)`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := NewHandler("h", defaults(), nil, nil)
			pd := newPD(t, "", nil)
			for _, c := range []struct {
				check  func([]string) error
				decode func() string
			}{
				{h.CheckProfiles, func() string { return h.params.Profiles.Decode }},
				{pd.CheckProfiles, func() string { return pd.params.DecodeProfile }},
			} {
				err := c.check(tt.configured)
				if plugintest.WantErr(t, err, tt.wantErr) {
					continue
				}
				if c.decode() != tt.wantDecode {
					t.Fatalf("err %v decode %q, want %q", err, c.decode(), tt.wantDecode)
				}
			}
		})
	}
}

// TestCheckStageProfiles: a stage profile a handler names must exist, every configured
// profile must be one of its stages, and a stage with a decider needs its profile unless the
// configuration has one profile (decode-only); errors name the plugin and the profile.
func TestCheckStageProfiles(t *testing.T) {
	withParams := func(mut func(p *Parameters)) Parameters {
		p := defaults()
		mut(p.withDeciders())
		return p
	}
	tests := []struct {
		name       string
		params     Parameters
		configured []string
		wantErr    string
	}{
		{"E/P/D", withParams(func(*Parameters) {}), []string{"decode", "prefill", "encode"}, ""},
		{"P/D without an encode profile or decider", defaults(), []string{"decode", "prefill"}, ""},
		{"decode-only with deciders (one profile)", withParams(func(*Parameters) {}), []string{"default"}, ""},
		{"custom prefill name configured", withParams(func(p *Parameters) { p.Profiles.Prefill = "p" }), []string{"decode", "p", "encode"}, ""},
		{"misspelled prefill parameter", withParams(func(p *Parameters) { p.Profiles.Prefill = "prefil" }), []string{"decode", "prefill", "encode"},
			`plugin h/disagg-profile-handler: prefill profile "prefil" (parameter profiles.prefill) is not configured (scheduling profiles: decode, encode, prefill)`},
		{"misspelled prefill parameter, single profile", withParams(func(p *Parameters) { p.Profiles.Prefill = "prefil" }), []string{"decode"},
			`prefill profile "prefil" (parameter profiles.prefill) is not configured`},
		{"misspelled encode parameter", withParams(func(p *Parameters) { p.Profiles.Encode = "enc0de" }), []string{"decode", "prefill", "encode"},
			`encode profile "enc0de" (parameter profiles.encode) is not configured`},
		{"misspelled prefill profile", withParams(func(*Parameters) {}), []string{"decode", "prefil", "encode"},
			`scheduling profile "prefil" is none of its stages (decode "decode", prefill "prefill", encode "encode")`},
		{"prefill decider without its profile", withParams(func(*Parameters) {}), []string{"decode", "encode"},
			`the prefill decider "pd" is configured but the prefill profile "prefill" is not`},
		{"encode decider without its profile", withParams(func(*Parameters) {}), []string{"decode", "prefill"},
			`the encode decider "mm" is configured but the encode profile "encode" is not`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := NewHandler("h", tt.params, nil, nil).CheckProfiles(tt.configured)
			plugintest.WantErr(t, err, tt.wantErr)
		})
	}
	for _, tt := range []struct {
		name, params string
		configured   []string
		wantErr      string
	}{
		{"pd-profile-handler P/D", ``, []string{"decode", "prefill"}, ""},
		{"pd-profile-handler decode-only", ``, []string{"default"}, ""},
		{"pd-profile-handler explicit empty prefill", `{"prefillProfile":""}`, []string{"decode"}, ""},
		{"pd-profile-handler misspelled prefillProfile", `{"prefillProfile":"prefil"}`, []string{"decode", "prefill"},
			`plugin pd/pd-profile-handler: prefill profile "prefil" (parameter prefillProfile) is not configured`},
		{"pd-profile-handler without a prefill profile", ``, []string{"decode", "other"}, `scheduling profile "other" is none of its stages`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := newPD(t, tt.params, nil).CheckProfiles(tt.configured)
			plugintest.WantErr(t, err, tt.wantErr)
		})
	}
}

// withDeciders sets both stages' deciders (names only: CheckProfiles does not call them).
func (p *Parameters) withDeciders() *Parameters {
	p.Deciders = Deciders{Prefill: "pd", Encode: "mm"}
	return p
}

// A stage's reason is read only by the debug log and the decision trace, so it is built only
// for them; the stage's outcome is the same either way.
func TestStageReasonsOnlyWhenExplained(t *testing.T) {
	h := NewHandler("h", defaults(), &fakeDecider{name: "dec", yes: true}, nil)
	marked := fwksched.NewCycleState()
	contract.MarkSkipPrefill(marked, "combined pick")
	for _, tc := range []struct {
		name    string
		cs      *fwksched.CycleState
		decider contract.Decider
		ep      fwksched.Endpoint
		want    string
		run     bool
	}{
		{name: "decider", cs: fwksched.NewCycleState(), decider: &fakeDecider{name: "dec", yes: true}, ep: dEp, want: "dec: fake (always)", run: true},
		{name: "skip marker", cs: marked, decider: &fakeDecider{name: "dec", yes: true}, ep: dEp, want: "skip marker in cycle state: combined pick"},
		{name: "no decider", cs: fwksched.NewCycleState(), ep: dEp, want: "no deciders.prefill configured: prefill disaggregation disabled"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run, reason := h.decide(context.Background(), tc.cs, req(), tc.decider, tc.ep, contract.SkipPrefillKey, "prefill", true, true)
			if run != tc.run || reason != tc.want {
				t.Fatalf("explained: %v %q, want %v %q", run, reason, tc.run, tc.want)
			}
			if run, reason := h.decide(context.Background(), tc.cs, req(), tc.decider, tc.ep, contract.SkipPrefillKey, "prefill", true, false); run != tc.run || reason != "" {
				t.Fatalf("unexplained: %v %q, want %v and no reason", run, reason, tc.run)
			}
		})
	}
	var logged []string
	logger := funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{Verbosity: 4})
	h.Pick(logr.NewContext(context.Background(), logger), fwksched.NewCycleState(), req(), eptest.Profiles("decode", "prefill"), resultsOf("decode", res(dEp)))
	if all := strings.Join(logged, "\n"); !strings.Contains(all, `"msg"="prefill stage decision"`) ||
		!strings.Contains(all, `"run"=true "reason"="dec: fake (always)"`) {
		t.Fatalf("debug log lacks the prefill stage's reason:\n%s", all)
	}
}
