package routingheaders

import (
	"context"
	"maps"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func pick(eps ...fwksched.Endpoint) *fwksched.ProfileRunResult {
	return &fwksched.ProfileRunResult{TargetEndpoints: eps}
}

func TestWrite(t *testing.T) {
	vllm := map[string]string{podmodel.LabelEngine: "vllm", podmodel.LabelKVConnectorType: "nixl"}
	prefill := eptest.Scheduling(eptest.Spec{Name: "p0", Address: "10.0.0.1", Port: "8000", Role: "prefill", Labels: vllm})
	prefillV6 := eptest.Scheduling(eptest.Spec{Name: "p1", Address: "fd00::1", Port: "8000", Role: "prefill"})
	decode := eptest.Scheduling(eptest.Spec{Name: "d0", Address: "10.0.0.2", Port: "8000", Role: "decode"})
	decodeEnginePort := eptest.Scheduling(eptest.Spec{Name: "d1", Address: "10.0.0.3", Port: "8000", Role: "decode",
		Labels: map[string]string{podmodel.LabelPort: "8200"}})
	decodeBadPort := eptest.Scheduling(eptest.Spec{Name: "d2", Address: "10.0.0.4", Port: "8000", Role: "decode",
		Labels: map[string]string{podmodel.LabelPort: "not-a-port"}})
	enc0 := eptest.Scheduling(eptest.Spec{Name: "e0", Address: "10.0.1.1", Port: "8000", Role: "encode"})
	enc1 := eptest.Scheduling(eptest.Spec{Name: "e1", Address: "10.0.1.2", Port: "8001", Role: "encode"})

	cases := []struct {
		name    string
		headers map[string]string // what the request carried
		results map[string]*fwksched.ProfileRunResult
		want    map[string]string // the request's headers afterwards
	}{
		{name: "decode only: a client's routing headers, in any case, are gone",
			headers: map[string]string{"X-Prefiller-Host-Port": "evil:1", protocol.HeaderEncoderHostsPorts: "evil:2", "other": "kept"},
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decode)},
			want:    map[string]string{"other": "kept"}},
		{name: "prefill leg with the pod's engine and connector",
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decode), "prefill": pick(prefill)},
			want: map[string]string{protocol.HeaderPrefillerHostPort: "10.0.0.1:8000", protocol.HeaderPrefillerEngine: "vllm",
				protocol.HeaderPrefillerKVConnector: "nixl"}},
		{name: "IPv6 prefill is bracketed",
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decode), "prefill": pick(prefillV6)},
			want:    map[string]string{protocol.HeaderPrefillerHostPort: "[fd00::1]:8000"}},
		{name: "encoders comma-joined, the decode pod's engine port",
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decodeEnginePort), "encode": pick(enc0, enc1)},
			want:    map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.1.1:8000,10.0.1.2:8001", protocol.HeaderDecoderPort: "8200"}},
		{name: "a port label the pod model refuses is never forwarded",
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decodeBadPort)},
			want:    map[string]string{}},
		{name: "the data-parallel header set by the profile handler survives",
			headers: map[string]string{protocol.HeaderDataParallelHostPort: "10.0.0.2:8001"},
			results: map[string]*fwksched.ProfileRunResult{"decode": pick(decode)},
			want:    map[string]string{protocol.HeaderDataParallelHostPort: "10.0.0.2:8001"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req := &fwksched.LLMRequest{RequestId: "r", Headers: maps.Clone(tc.headers)}
			Write(req, &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: tc.results}, "prefill", "encode")
			if req.Headers == nil {
				req.Headers = map[string]string{}
			}
			if !maps.Equal(req.Headers, tc.want) {
				t.Fatalf("headers %v, want %v", req.Headers, tc.want)
			}
		})
	}
}

func TestWriteWithoutRequestOrResult(t *testing.T) {
	if w := Write(nil, nil, "prefill", "encode"); w != (Written{}) {
		t.Fatalf("nil request: %+v", w)
	}
	req := &fwksched.LLMRequest{Headers: map[string]string{protocol.HeaderPrefillerHostPort: "evil:1"}}
	Write(req, nil, "prefill", "encode")
	if len(req.Headers) != 0 {
		t.Fatalf("no result must still clear routing headers: %v", req.Headers)
	}
}

// LogWritten logs at debug verbosity only, and below it builds nothing: it runs on every
// request.
func TestLogWritten(t *testing.T) {
	plugin := fwkplugin.TypedName{Type: "disagg-profile-handler", Name: "h"}
	req := &fwksched.LLMRequest{RequestId: "r1"}
	w := Written{Prefill: "10.0.0.1:8000", Decoder: "8200"}
	for _, verbosity := range []int{0, 4} {
		var logged []string
		ctx := logr.NewContext(context.Background(), funcr.New(func(_, args string) { logged = append(logged, args) }, funcr.Options{Verbosity: verbosity}))
		LogWritten(ctx, plugin, req, w)
		if verbosity < 4 {
			if len(logged) != 0 {
				t.Fatalf("logged %q below debug", logged)
			}
			if n := testing.AllocsPerRun(100, func() { LogWritten(ctx, plugin, req, w) }); n != 0 {
				t.Fatalf("LogWritten below debug allocated %v times", n)
			}
			continue
		}
		want := `"plugin"="h/disagg-profile-handler" "requestID"="r1" "prefill"="10.0.0.1:8000" "encoders"="" "decoderPort"="8200"`
		if len(logged) != 1 || !strings.Contains(logged[0], want) {
			t.Fatalf("logged %q, want one line with %s", logged, want)
		}
	}
}

// The sidecar knobs come from the model-level config of any stage's pick, whichever stage
// carries it; gathering the picks costs nothing.
func TestSidecarKnobsFromAnyStage(t *testing.T) {
	cfg := map[string]string{protocol.AnnotationLabelPrefix + podmodel.AnnotationConfig: `{"profiles":{"default":{"routingConfig":{"pd":{"` + protocol.KnobPrefillRequestTimeout + `":7}}}}}`}
	plain := eptest.Scheduling(eptest.Spec{Name: "d0", Address: "10.0.0.2", Port: "8000", Role: "decode"})
	configured := eptest.Scheduling(eptest.Spec{Name: "p0", Address: "10.0.0.1", Port: "8000", Role: "prefill", Labels: cfg})
	result := func(decode, prefill fwksched.Endpoint) *fwksched.SchedulingResult {
		return &fwksched.SchedulingResult{PrimaryProfileName: "decode", ProfileResults: map[string]*fwksched.ProfileRunResult{
			"decode": {TargetEndpoints: []fwksched.Endpoint{decode}}, "prefill": {TargetEndpoints: []fwksched.Endpoint{prefill}}}}
	}
	req := &fwksched.LLMRequest{Headers: map[string]string{}}
	want := sidecarKnobs(req, result(configured, plain))
	if want == "" {
		t.Fatal("no knobs from the configured decode pick")
	}
	if got := sidecarKnobs(req, result(plain, configured)); got != want {
		t.Fatalf("knobs %q from the prefill pick, want %q", got, want)
	}
	none := result(plain, plain)
	if got := sidecarKnobs(req, none); got != "" {
		t.Fatalf("knobs %q without a config", got)
	}
	if n := testing.AllocsPerRun(100, func() { _ = sidecarKnobs(req, none) }); n != 0 {
		t.Fatalf("sidecarKnobs without a config allocated %v times", n)
	}
}
