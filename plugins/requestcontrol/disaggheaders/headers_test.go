package disaggheaders

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/lib/routingheaders"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func ep(addr, port string, labels map[string]string) fwksched.Endpoint {
	return eptest.Scheduling(eptest.Spec{Name: "p-" + port, Address: addr, Port: port, Labels: labels})
}

func res(eps ...fwksched.Endpoint) *fwksched.ProfileRunResult {
	return &fwksched.ProfileRunResult{TargetEndpoints: eps}
}

func TestFactory(t *testing.T) {
	tests := []struct {
		name, typ, params, wantErr string
		want                       Parameters
	}{
		{name: "defaults", typ: Type, want: Parameters{"prefill", "encode"}},
		{name: "custom", typ: Type, params: `{"prefillProfile":"my-prefill","encodeProfile":"my-encode"}`, want: Parameters{"my-prefill", "my-encode"}},
		{name: "prefill-header-handler backward compat", typ: LegacyType, params: `{"prefillProfile":"p"}`, want: Parameters{"p", "encode"}},
		{name: "invalid JSON", typ: Type, params: `{`, wantErr: `disagg-headers-handler "hh": invalid parameters: `},
		{name: "unknown field", typ: Type, params: `{"prefill":"x"}`, wantErr: `unknown field "prefill"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := Factory
			if tt.typ == LegacyType {
				f = LegacyFactory
			}
			p, err := f("hh", json.RawMessage(tt.params), nil)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			h := p.(*Handler)
			if h.Params() != tt.want || h.TypedName().Type != tt.typ || h.TypedName().Name != "hh" {
				t.Fatalf("%+v %v", h.Params(), h.TypedName())
			}
		})
	}
}

func TestPreRequest(t *testing.T) {
	prefill := ep("10.0.0.1", "8000", nil)
	v6 := ep("fd00::1", "8000", nil)
	sglangPrefill := ep("10.0.0.7", "30000", map[string]string{
		protocol.AnnotationLabelPrefix + podmodel.AnnotationBootstrap: "8998", podmodel.LabelEngine: "sglang", podmodel.LabelKVConnectorType: "mooncake"})
	giePrefill := ep("10.0.0.8", "8000", map[string]string{podmodel.LabelGIEEngineType: "trtllm-serve", podmodel.AnnotationBootstrap: "9000"})
	enc1, enc2 := ep("10.0.0.5", "8000", nil), ep("10.0.0.6", "8001", nil)
	rs := func(addr, set string) fwksched.Endpoint {
		return ep(addr, "8000", map[string]string{podmodel.LabelRolesetName: set})
	}
	rs1, rs2, rs1b := rs("10.0.1.1", "a"), rs("10.0.1.2", "b"), rs("10.0.1.3", "a")
	portPrefill := ep("10.0.0.9", "8000", map[string]string{podmodel.LabelPort: "9001"})
	portEnc := ep("10.0.0.10", "8000", map[string]string{podmodel.LabelPort: "9002"})
	badPrefill := ep("10.0.0.11", "8000", map[string]string{podmodel.LabelEngine: "tgi", podmodel.LabelKVConnectorType: "bogus",
		protocol.AnnotationLabelPrefix + podmodel.AnnotationBootstrap: "70000", podmodel.LabelPort: "0"})
	spoof := map[string]string{protocol.HeaderPrefillerHostPort: "evil:1", protocol.HeaderEncoderHostsPorts: "evil:2",
		"X-Pdgate-Prefiller-Engine": "evil"}
	tests := []struct {
		name     string
		profile  string
		result   *fwksched.SchedulingResult
		headers  map[string]string
		want     map[string]string
		nilReq   bool
		noChange bool
	}{
		{name: "nil request", nilReq: true},
		{name: "nil result clears stale headers", headers: spoof, want: map[string]string{}},
		{name: "prefill present", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(prefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000"}},
		{name: "prefill absent clears stale header", headers: spoof, result: result(nil), want: map[string]string{}},
		{name: "stale header replaced", headers: spoof, result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(prefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000"}},
		{name: "custom profile", profile: "my-prefill", result: result(map[string]*fwksched.ProfileRunResult{"my-prefill": res(prefill), "prefill": res(v6)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000"}},
		{name: "nil prefill result", result: result(map[string]*fwksched.ProfileRunResult{"prefill": nil}), want: map[string]string{}},
		{name: "empty prefill endpoints", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res()}), want: map[string]string{}},
		{name: "IPv6 bracketed", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(v6)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "[fd00::1]:8000"}},
		{name: "second prefill endpoint of the same roleset is the alternate", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(prefill, v6)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000", protocol.HeaderPrefillerAlternateHostPort: "[fd00::1]:8000"}},
		{name: "no alternate from another roleset", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(rs1, rs2, rs1b)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.1.1:8000", protocol.HeaderPrefillerAlternateHostPort: "10.0.1.3:8000"}},
		{name: "no alternate at the same address", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(prefill, prefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000"}},
		{name: "model.aibrix.ai/port decides the prefill and encode ports", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(portPrefill), "encode": res(portEnc, enc2)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.9:9001", protocol.HeaderEncoderHostsPorts: "10.0.0.10:9002,10.0.0.6:8001"}},
		{name: "values the pod model refuses are not forwarded", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(badPrefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.11:8000"}},
		{name: "sglang pod hints", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(sglangPrefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.7:30000", protocol.HeaderPrefillerBootstrapPort: "8998",
				protocol.HeaderPrefillerEngine: "sglang", protocol.HeaderPrefillerKVConnector: "mooncake"}},
		{name: "GIE engine label and plain bootstrap label", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(giePrefill)}),
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.8:8000", protocol.HeaderPrefillerBootstrapPort: "9000",
				protocol.HeaderPrefillerEngine: "trtllm"}},
		{name: "one encoder", result: result(map[string]*fwksched.ProfileRunResult{"encode": res(enc1)}),
			want: map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.0.5:8000"}},
		{name: "multiple encoders comma list", result: result(map[string]*fwksched.ProfileRunResult{"encode": res(enc1, enc2)}),
			want: map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.0.5:8000,10.0.0.6:8001"}},
		{name: "encode nil clears stale", headers: spoof, result: result(map[string]*fwksched.ProfileRunResult{"encode": nil}), want: map[string]string{}},
		{name: "encode and prefill", result: result(map[string]*fwksched.ProfileRunResult{"encode": res(enc1), "prefill": res(prefill)}),
			want: map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.0.5:8000", protocol.HeaderPrefillerHostPort: "10.0.0.1:8000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			params := ""
			if tt.profile != "" {
				params = `{"prefillProfile":"` + tt.profile + `"}`
			}
			p, _ := Factory("hh", json.RawMessage(params), nil)
			h := p.(*Handler)
			if tt.nilReq {
				h.PreRequest(context.Background(), nil, tt.result)
				return
			}
			r := &fwksched.LLMRequest{Headers: map[string]string{"other": "kept"}}
			for k, v := range tt.headers {
				r.Headers[k] = v
			}
			h.PreRequest(context.Background(), r, tt.result)
			if r.Headers["other"] != "kept" {
				t.Fatal("unrelated header lost")
			}
			delete(r.Headers, "other")
			if len(r.Headers) != len(tt.want) {
				t.Fatalf("headers %v want %v", r.Headers, tt.want)
			}
			for k, v := range tt.want {
				if r.Headers[k] != v {
					t.Fatalf("%s=%q want %q (all %v)", k, r.Headers[k], v, r.Headers)
				}
			}
		})
	}
}

func result(m map[string]*fwksched.ProfileRunResult) *fwksched.SchedulingResult {
	all := map[string]*fwksched.ProfileRunResult{"decode": res(ep("10.0.0.2", "8000", nil))}
	for k, v := range m {
		all[k] = v
	}
	return &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: all}
}

// Running the header writer next to disagg-profile-handler writes the same values twice,
// which is redundant but not conflicting (llm-d TestBothProfileAndHeadersHandlerPreRequest).
func TestWriteIdempotent(t *testing.T) {
	r := &fwksched.LLMRequest{Headers: map[string]string{}}
	res := result(map[string]*fwksched.ProfileRunResult{"prefill": res(ep("10.0.0.1", "8000", nil))})
	a := routingheaders.Write(r, res, "prefill", "encode")
	b := routingheaders.Write(r, res, "prefill", "encode")
	if a != b || r.Headers[protocol.HeaderPrefillerHostPort] != "10.0.0.1:8000" {
		t.Fatalf("%v %v %v", a, b, r.Headers)
	}
	// A request with a nil header map gets one.
	r2 := &fwksched.LLMRequest{}
	routingheaders.Write(r2, res, "prefill", "encode")
	if r2.Headers[protocol.HeaderPrefillerHostPort] == "" {
		t.Fatal("nil header map not handled")
	}
}

// pd-profile-handler (primaryPort) sets x-data-parallel-host-port in ProcessResults, before
// Write runs in PreRequest: Write must keep it while it clears the routing headers it owns.
func TestWriteKeepsProfileHandlersDataParallelHeader(t *testing.T) {
	tests := []struct {
		name   string
		result *fwksched.SchedulingResult
	}{
		{name: "prefill ran", result: result(map[string]*fwksched.ProfileRunResult{"prefill": res(ep("10.0.0.1", "8000", nil))})},
		{name: "decode only", result: result(map[string]*fwksched.ProfileRunResult{})},
		{name: "no result", result: nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fwksched.LLMRequest{Headers: map[string]string{
				protocol.HeaderDataParallelHostPort: "10.0.0.9:8001",
				protocol.HeaderEncoderHostsPorts:    "10.0.0.7:1",
			}}
			routingheaders.Write(r, tt.result, "prefill", "encode")
			if got := r.Headers[protocol.HeaderDataParallelHostPort]; got != "10.0.0.9:8001" {
				t.Errorf("data-parallel header %q, want the profile handler's 10.0.0.9:8001", got)
			}
			if _, ok := r.Headers[protocol.HeaderEncoderHostsPorts]; ok {
				t.Errorf("stale encoder header survived: %v", r.Headers)
			}
		})
	}
}

// The per-profile sidecar knobs of the request's model.aibrix.ai/config profile reach the
// sidecar in x-pdgate-sidecar-knobs, decode-only requests included; a client copy never
// survives, and invalid values are left out.
func TestWriteSidecarKnobs(t *testing.T) {
	cfg := `{"defaultProfile":"std","profiles":{
	  "std":{"routingConfig":{"pd":{"prefillRequestTimeout":5,"decodeStreamIdleTimeout":9,"minMatchPct":10}}},
	  "slow":{"routingConfig":{"pd":{"decodeResponseTimeout":600,"decodeAbortTimeout":-1}}},
	  "none":{"routingConfig":{}}}}`
	decode := ep("10.0.0.2", "8000", map[string]string{protocol.AnnotationLabelPrefix + podmodel.AnnotationConfig: cfg})
	withConfig := func(m map[string]*fwksched.ProfileRunResult) *fwksched.SchedulingResult {
		r := result(m)
		r.ProfileResults["decode"] = res(decode)
		return r
	}
	tests := []struct {
		name    string
		headers map[string]string
		result  *fwksched.SchedulingResult
		want    string
	}{
		{name: "default profile, P/D", result: withConfig(map[string]*fwksched.ProfileRunResult{"prefill": res(ep("10.0.0.1", "8000", nil))}),
			want: "prefillRequestTimeout=5,decodeStreamIdleTimeout=9"},
		{name: "default profile, decode only", result: withConfig(nil), want: "prefillRequestTimeout=5,decodeStreamIdleTimeout=9"},
		{name: "config-profile header picks the profile; invalid value left out", headers: map[string]string{"Config-Profile": "slow"},
			result: withConfig(nil), want: "decodeResponseTimeout=600"},
		{name: "profile without sidecar knobs clears a client copy", headers: map[string]string{"config-profile": "none", protocol.HeaderSidecarKnobs: "prefillRequestTimeout=3600"},
			result: withConfig(nil), want: ""},
		{name: "no config annotation clears a client copy", headers: map[string]string{"X-Pdgate-Sidecar-Knobs": "decodeResponseTimeout=1"},
			result: result(nil), want: ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fwksched.LLMRequest{Headers: map[string]string{}}
			for k, v := range tt.headers {
				r.Headers[k] = v
			}
			routingheaders.Write(r, tt.result, "prefill", "encode")
			got, ok := r.Headers[protocol.HeaderSidecarKnobs]
			if got != tt.want || (tt.want == "" && ok) {
				t.Fatalf("knobs header %q (set %v), want %q; headers %v", got, ok, tt.want, r.Headers)
			}
			for k := range r.Headers {
				if strings.EqualFold(k, protocol.HeaderSidecarKnobs) && k != protocol.HeaderSidecarKnobs {
					t.Fatalf("client copy %s survived", k)
				}
			}
		})
	}
}

// x-pdgate-decoder-port carries the decode pick's model.aibrix.ai/port (the pod model's
// validated value) and nothing else: absent without a valid label, and a client copy (any
// letter case) never survives.
func TestWriteDecoderPort(t *testing.T) {
	decode := func(labels map[string]string) map[string]*fwksched.ProfileRunResult {
		return map[string]*fwksched.ProfileRunResult{"decode": res(ep("10.0.0.2", "8000", labels))}
	}
	port := func(v string) map[string]string { return map[string]string{podmodel.LabelPort: v} }
	spoof := map[string]string{protocol.HeaderDecoderPort: "22", "X-Pdgate-Decoder-Port": "23"}
	tests := []struct {
		name    string
		result  *fwksched.SchedulingResult
		headers map[string]string
		want    string // "" = absent
	}{
		{name: "label decides the decode port", result: result(decode(port("9100"))), want: "9100"},
		{name: "label with prefill", result: result(map[string]*fwksched.ProfileRunResult{
			"decode": res(ep("10.0.0.2", "8000", port("9100"))), "prefill": res(ep("10.0.0.1", "8000", port("9001")))}), want: "9100"},
		{name: "first decode endpoint only", result: result(map[string]*fwksched.ProfileRunResult{
			"decode": res(ep("10.0.0.2", "8000", nil), ep("10.0.0.3", "8000", port("9100")))})},
		{name: "no label", result: result(decode(nil))},
		{name: "label naming the routed port (the sidecar's) redirects nothing", result: result(decode(port("8000")))},
		{name: "label naming the routed port, written differently", result: result(decode(port("08000")))},
		{name: "prefill pod's label is not the decode port", result: result(map[string]*fwksched.ProfileRunResult{
			"prefill": res(ep("10.0.0.1", "8000", port("9001")))})},
		{name: "port 0 refused", result: result(decode(port("0")))},
		{name: "port above 65535 refused", result: result(decode(port("65536")))},
		{name: "non-numeric refused", result: result(decode(port("http")))},
		{name: "client copy dropped without a label", headers: spoof, result: result(decode(nil))},
		{name: "client copy replaced by the label", headers: spoof, result: result(decode(port("9100"))), want: "9100"},
		{name: "client copy dropped without a result", headers: spoof},
		{name: "client copy dropped without a decode endpoint", headers: spoof,
			result: &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{"decode": res()}}},
		{name: "custom decode profile name", result: &fwksched.SchedulingResult{PrimaryProfileName: "my-decode",
			ProfileResults: map[string]*fwksched.ProfileRunResult{"my-decode": res(ep("10.0.0.2", "8000", port("9100")))}}, want: "9100"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &fwksched.LLMRequest{Headers: map[string]string{}}
			for k, v := range tt.headers {
				r.Headers[k] = v
			}
			w := routingheaders.Write(r, tt.result, "prefill", "encode")
			var got []string
			for k, v := range r.Headers {
				if strings.EqualFold(k, protocol.HeaderDecoderPort) {
					got = append(got, k+"="+v)
				}
			}
			switch {
			case tt.want == "" && len(got) > 0:
				t.Fatalf("decoder port header %v, want none", got)
			case tt.want != "" && (len(got) != 1 || r.Headers[protocol.HeaderDecoderPort] != tt.want):
				t.Fatalf("decoder port header %v, want %s=%s", got, protocol.HeaderDecoderPort, tt.want)
			}
			if w.Decoder != tt.want {
				t.Fatalf("Written.Decoder %q, want %q", w.Decoder, tt.want)
			}
		})
	}
}
