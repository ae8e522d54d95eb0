package disaggprofile

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func TestPDHandlerFactory(t *testing.T) {
	def := PDParameters{DecodeProfile: "decode", PrefillProfile: "prefill", PrefixPluginType: "prefix-cache-scorer",
		PrefixPluginName: "prefix-cache-scorer", DeciderPluginName: "prefix-based-pd-decider"}
	with := func(f func(*PDParameters)) PDParameters { p := def; f(&p); return p }
	tests := []struct {
		name, params, wantErr, resolveErr string
		want                              PDParameters
	}{
		{name: "defaults", want: def},
		{name: "custom values", params: `{"decodeProfile":"d","prefillProfile":"p","prefixPluginType":"t","prefixPluginName":"n","deciderPluginName":"prefix-based-pd-decider"}`,
			want: with(func(p *PDParameters) {
				p.DecodeProfile, p.PrefillProfile, p.PrefixPluginType, p.PrefixPluginName = "d", "p", "t", "n"
			})},
		{name: "prefixPluginName defaults to type", params: `{"prefixPluginType":"t"}`,
			want: with(func(p *PDParameters) { p.PrefixPluginType, p.PrefixPluginName = "t", "t" })},
		{name: "primaryPort 0", params: `{"primaryPort":0}`, want: def},
		{name: "primaryPort 1", params: `{"primaryPort":1}`, want: with(func(p *PDParameters) { p.PrimaryPort = 1 })},
		{name: "primaryPort 65535", params: `{"primaryPort":65535}`, want: with(func(p *PDParameters) { p.PrimaryPort = 65535 })},
		{name: "primaryPort 65536", params: `{"primaryPort":65536}`, wantErr: "invalid primaryPort: must be between 1 and 65535, got 65536"},
		{name: "primaryPort -10", params: `{"primaryPort":-10}`, wantErr: "invalid primaryPort: must be between 1 and 65535, got -10"},
		{name: "primaryPort float", params: `{"primaryPort":8000.5}`, wantErr: `pd-profile-handler "pd": invalid parameters: `},
		{name: "empty profile names are valid", params: `{"decodeProfile":"","prefillProfile":""}`,
			want: with(func(p *PDParameters) { p.DecodeProfile, p.PrefillProfile = "", "" })},
		{name: "invalid JSON", params: `{`, wantErr: `pd-profile-handler "pd": invalid parameters: `},
		{name: "empty decider name", params: `{"deciderPluginName":""}`, wantErr: "decider plugin name is not defined"},
		{name: "unknown decider", params: `{"deciderPluginName":"nope"}`, resolveErr: "invalid decider plugin type: nope",
			want: with(func(p *PDParameters) { p.DeciderPluginName = "nope" })},
		{name: "not a decider", params: `{"deciderPluginName":"x"}`, wantErr: "decider plugin of type: x does not implement pdDeciderPlugin"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			handle := newHandle(t, map[string]fwkplugin.Plugin{"prefix-based-pd-decider": &fakeDecider{name: "prefix-based-pd-decider"}, "x": notDecider{}})
			checkParams[PDParameters, *PDHandler](t, PDHandlerFactory, "pd", tt.params, handle, tt.wantErr, tt.want, tt.resolveErr)
		})
	}
}

func newPD(t *testing.T, params string, d contract.Decider) *PDHandler {
	t.Helper()
	plugins := map[string]fwkplugin.Plugin{}
	if d != nil {
		plugins["prefix-based-pd-decider"] = d
	}
	p, err := PDHandlerFactory("pd", json.RawMessage(params), newHandle(t, plugins))
	if err != nil {
		t.Fatal(err)
	}
	return p.(*PDHandler)
}

func TestPDHandlerPick(t *testing.T) {
	tests := []struct {
		name    string
		yes     bool
		results map[string]*fwksched.ProfileRunResult
		want    string
	}{
		{"decode not run → decode", true, resultsOf(), "decode"},
		{"decode failed → done", true, resultsOf("decode", nil), ""},
		{"all profiles ran → done", true, resultsOf("decode", res(dEp), "prefill", res(pEp)), ""},
		{"decider approves → prefill", true, resultsOf("decode", res(dEp)), "prefill"},
		{"decider declines → done", false, resultsOf("decode", res(dEp)), ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newPD(t, ``, &fakeDecider{name: "prefix-based-pd-decider", yes: tt.yes})
			got := h.Pick(context.Background(), fwksched.NewCycleState(), req(), eptest.Profiles("decode", "prefill"), tt.results)
			if strings.Join(keys(got), ",") != tt.want {
				t.Fatalf("Pick = %v want %q", keys(got), tt.want)
			}
		})
	}
}

func TestPDHandlerDecisionMetric(t *testing.T) {
	for _, yes := range []bool{true, false} {
		h := newPD(t, ``, &fakeDecider{name: "prefix-based-pd-decider", yes: yes})
		model := "pd-metric"
		want := DecisionDecodeOnly
		if yes {
			model, want = "pd-metric-yes", DecisionPrefillDecode
		}
		h.Pick(context.Background(), fwksched.NewCycleState(), &fwksched.LLMRequest{TargetModel: model}, eptest.Profiles("decode", "prefill"), resultsOf("decode", res(dEp)))
		if v := testutil.ToFloat64(h.decisions.WithLabelValues(model, want)); v != 1 { // the handler's own counter
			t.Fatalf("%s=%v", want, v)
		}
	}
}

func TestPDHandlerProcessResults(t *testing.T) {
	tests := []struct {
		name     string
		params   string
		results  map[string]*fwksched.ProfileRunResult
		wantErr  bool
		wantPort string
		wantDP   string
		prefill  bool
	}{
		{name: "decode failed", results: resultsOf("decode", nil), wantErr: true},
		{name: "decode only", results: resultsOf("decode", res(dEp)), wantPort: "8000"},
		{name: "with prefill", results: resultsOf("decode", res(dEp), "prefill", res(pEp)), wantPort: "8000", prefill: true},
		{name: "primaryPort rewrites decode port", params: `{"primaryPort":9000}`, results: resultsOf("decode", res(dEp)),
			wantPort: "9000", wantDP: "10.0.0.2:8000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newPD(t, tt.params, &fakeDecider{name: "prefix-based-pd-decider"})
			r := req()
			out, err := h.ProcessResults(context.Background(), nil, r, tt.results)
			if tt.wantErr {
				if err == nil || !strings.Contains(err.Error(), "failed to find available decode workers") {
					t.Fatalf("err %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			got := out.ProfileResults["decode"].TargetEndpoints[0].GetMetadata().Port
			_, hasPrefill := out.ProfileResults["prefill"]
			if out.PrimaryProfileName != "decode" || got != tt.wantPort || r.Headers[HeaderDataParallelHostPort] != tt.wantDP || hasPrefill != tt.prefill {
				t.Fatalf("port %s dp %q prefill %v", got, r.Headers[HeaderDataParallelHostPort], hasPrefill)
			}
			if dEp.GetMetadata().Port != "8000" {
				t.Fatal("original endpoint mutated")
			}
		})
	}
}
