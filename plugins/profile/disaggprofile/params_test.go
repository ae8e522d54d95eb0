package disaggprofile

import (
	"encoding/json"
	"testing"

	"github.com/go-logr/logr"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestHandlerFactory(t *testing.T) {
	deciders := map[string]fwkplugin.Plugin{
		"prefix-based-pd-decider":          &fakeDecider{name: "prefix-based-pd-decider"},
		"always-disagg-multimodal-decider": &fakeDecider{name: "always-disagg-multimodal-decider"},
		"not-a-decider":                    notDecider{},
	}
	tests := []struct {
		name     string
		params   string
		want     Parameters
		wantErr  string
		resolveE string // error from ResolveReferences
	}{
		{name: "decode-only defaults", params: ``,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "PD style", params: `{"deciders":{"prefill":"prefix-based-pd-decider"}}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Prefill: "prefix-based-pd-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "PD custom profiles", params: `{"profiles":{"decode":"d","prefill":"p"},"deciders":{"prefill":"prefix-based-pd-decider"}}`,
			want: Parameters{Profiles: Profiles{"d", "p", "encode"}, Deciders: Deciders{Prefill: "prefix-based-pd-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "EPD style without encode decider", params: `{"profiles":{"encode":"enc"}}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "enc"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "EPD with encode decider", params: `{"deciders":{"encode":"always-disagg-multimodal-decider"}}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Encode: "always-disagg-multimodal-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "full EPD", params: `{"deciders":{"prefill":"prefix-based-pd-decider","encode":"always-disagg-multimodal-decider"}}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{"prefix-based-pd-decider", "always-disagg-multimodal-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "unknown prefill decider", params: `{"deciders":{"prefill":"nope"}}`, resolveE: "deciders.prefill plugin not found: nope",
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Prefill: "nope"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "unknown encode decider", params: `{"deciders":{"encode":"nope"}}`, resolveE: "deciders.encode plugin not found: nope",
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Encode: "nope"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "not a decider", params: `{"deciders":{"prefill":"not-a-decider"}}`, wantErr: "plugin not-a-decider does not implement prefillDeciderPlugin"},
		{name: "deprecated prefillDeciderPluginName", params: `{"prefillDeciderPluginName":"prefix-based-pd-decider"}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Prefill: "prefix-based-pd-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "deprecated encodeDeciderPluginName", params: `{"encodeDeciderPluginName":"always-disagg-multimodal-decider"}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Encode: "always-disagg-multimodal-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "prefillDeciderPluginName outranks deciderPluginName", params: `{"deciderPluginName":"x","prefillDeciderPluginName":"prefix-based-pd-decider"}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Prefill: "prefix-based-pd-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "deprecated custom profile names", params: `{"decodeProfile":"d","prefillProfile":"p","encodeProfile":"e"}`,
			want: Parameters{Profiles: Profiles{"d", "p", "e"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "pd-profile-handler keys accepted and ignored", params: `{"deciderPluginName":"prefix-based-pd-decider","prefixPluginType":"prefix-cache-scorer","primaryPort":8000}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, Deciders: Deciders{Prefill: "prefix-based-pd-decider"}, StageOrder: DecodeFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "unknown field rejected (llm-d newer strict decoding)", params: `{"profiles":{"decode":"d"},"bogus":1}`, wantErr: `unknown field "bogus"`},
		{name: "mix flat and nested", params: `{"decodeProfile":"d","profiles":{"prefill":"p"}}`, wantErr: mixError},
		{name: "mix deprecated decider and nested deciders", params: `{"deciderPluginName":"a","deciders":{"prefill":"prefix-based-pd-decider"}}`, wantErr: mixError},
		{name: "invalid JSON", params: `{"profiles":`, wantErr: `disagg-profile-handler "h": invalid parameters: `},
		{name: "stageOrder prefill-first", params: `{"stageOrder":"prefillFirst"}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, StageOrder: PrefillFirst, CombinedDecodeSkipsPrefill: true}},
		{name: "stageOrder invalid", params: `{"stageOrder":"sideways"}`, wantErr: `invalid stageOrder "sideways"`},
		{name: "combined skip off", params: `{"combinedDecodeSkipsPrefill":false}`,
			want: Parameters{Profiles: Profiles{"decode", "prefill", "encode"}, StageOrder: DecodeFirst}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := checkParams[Parameters, *Handler](t, HandlerFactory, "h", tt.params, newHandle(t, deciders), tt.wantErr, tt.want, tt.resolveE)
			if h == nil {
				return
			}
			if h.TypedName().Type != HandlerType || h.TypedName().Name != "h" {
				t.Fatalf("typed name %v", h.TypedName())
			}
		})
	}
}

// A decider declared after the handler is found on first use (llm-d newer).
func TestHandlerFindsLaterDecider(t *testing.T) {
	handle := newHandle(t, nil)
	p, err := HandlerFactory("h", json.RawMessage(`{"deciders":{"prefill":"later"}}`), handle)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDecider{name: "later", yes: true}
	handle.AddPlugin("later", d)
	h := p.(*Handler)
	got := h.Pick(t.Context(), nil, req(), eptest.Profiles("decode", "prefill"), resultsOf("decode", res(ep("d", "10.0.0.2", "8000", nil))))
	if _, ok := got["prefill"]; !ok || d.calls != 1 {
		t.Fatalf("later decider not used: %v calls=%d", keys(got), d.calls)
	}
}

func TestParseStageOrder(t *testing.T) {
	for in, want := range map[string]StageOrder{"": DecodeFirst, "decode-first": DecodeFirst, "DecodeFirst": DecodeFirst,
		"decode_first": DecodeFirst, "prefill-first": PrefillFirst, "PREFILL_FIRST": PrefillFirst, "prefillFirst": PrefillFirst} {
		got, err := ParseStageOrder(in)
		if err != nil || got != want {
			t.Errorf("ParseStageOrder(%q) = %v, %v", in, got, err)
		}
	}
	if _, err := ParseStageOrder("first"); err == nil {
		t.Error("want error")
	}
}

func TestParseParametersEmptyNestedWithFlatIsNotMix(t *testing.T) {
	p, err := ParseParameters("test", json.RawMessage(`{"decodeProfile":"d","profiles":{}}`), logr.Discard())
	if err != nil || p.Profiles.Decode != "d" {
		t.Fatalf("%+v %v", p, err)
	}
}

func FuzzParseParameters(f *testing.F) {
	for _, s := range []string{``, `{}`, `{"deciders":{"prefill":"p"}}`, `{"decodeProfile":"d","profiles":{"decode":"x"}}`,
		`{"stageOrder":"prefill_first"}`, `{"primaryPort":1.5}`, `[]`, `{"profiles":null}`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := ParseParameters("test", json.RawMessage(s), logr.Discard())
		if err != nil {
			return
		}
		if p.Profiles.Decode == "" || p.Profiles.Prefill == "" || p.Profiles.Encode == "" {
			t.Fatalf("accepted params with an empty profile name: %+v", p)
		}
		if p.StageOrder != DecodeFirst && p.StageOrder != PrefillFirst {
			t.Fatalf("stage order %q", p.StageOrder)
		}
	})
}
