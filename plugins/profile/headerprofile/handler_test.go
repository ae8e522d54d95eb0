package headerprofile

import (
	"context"
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
	"github.com/pdgate/pdgate/test/testsupport/eptest"
)

func keys(m map[string]fwksched.SchedulerProfile) string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ",")
}

func TestParseParameters(t *testing.T) {
	tests := []struct {
		name, typ, raw string
		want           Parameters
		wantErr        string
	}{
		{name: "llm-d's defaults", typ: Type, raw: ``, want: Parameters{HeaderName: "epp-profile", DefaultProfile: "decode"}},
		{name: "the alias reads EPP-Phase", typ: PhaseType, raw: `{}`, want: Parameters{HeaderName: "epp-phase", DefaultProfile: "decode"}},
		{name: "header lower-cased, default kept as written", typ: Type, raw: `{"headerName":" X-Stage ","defaultProfile":"Prefill"}`,
			want: Parameters{HeaderName: "x-stage", DefaultProfile: "Prefill"}},
		{name: "unknown field", typ: Type, raw: `{"header":"x"}`, wantErr: `unknown field "header"`},
		{name: "empty header name", typ: Type, raw: `{"headerName":" "}`, wantErr: "headerName"},
		{name: "empty default", typ: PhaseType, raw: `{"defaultProfile":""}`, wantErr: "defaultProfile"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseParameters(tc.typ, "h", json.RawMessage(tc.raw))
			if plugintest.WantErr(t, err, tc.wantErr, tc.typ) {
				return
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

// One profile runs: the only one, the header's, or the default; a name the config lacks runs
// nothing and is answered 400 with its cause.
func TestPickAndProcessResults(t *testing.T) {
	tests := []struct {
		name       string
		typ        string
		profiles   []string
		headers    map[string]string
		wantRun    string
		wantStatus int
	}{
		{name: "single profile always runs", typ: Type, profiles: []string{"default"}, headers: map[string]string{"epp-profile": "prefill"}, wantRun: "default"},
		{name: "header names the profile", typ: Type, profiles: []string{"prefill", "decode", "encode"}, headers: map[string]string{"epp-profile": "encode"}, wantRun: "encode"},
		{name: "header trimmed", typ: Type, profiles: []string{"prefill", "decode"}, headers: map[string]string{"epp-profile": "  prefill "}, wantRun: "prefill"},
		{name: "missing header: the default", typ: Type, profiles: []string{"prefill", "decode"}, wantRun: "decode"},
		{name: "blank header: the default", typ: Type, profiles: []string{"prefill", "decode"}, headers: map[string]string{"epp-profile": "  "}, wantRun: "decode"},
		{name: "profile names are case-sensitive", typ: Type, profiles: []string{"prefill", "decode"}, headers: map[string]string{"epp-profile": "Prefill"}, wantStatus: http.StatusBadRequest},
		{name: "unknown profile", typ: Type, profiles: []string{"prefill", "decode"}, headers: map[string]string{"epp-profile": "verify"}, wantStatus: http.StatusBadRequest},
		{name: "the alias reads EPP-Phase, not EPP-Profile", typ: PhaseType, profiles: []string{"prefill", "decode"},
			headers: map[string]string{"epp-phase": "prefill", "epp-profile": "decode"}, wantRun: "prefill"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := newHandler(tc.typ, "", nil)
			if err != nil {
				t.Fatal(err)
			}
			req := &fwksched.LLMRequest{Headers: tc.headers}
			profiles := eptest.Profiles(tc.profiles...)
			picked := h.Pick(context.Background(), nil, req, profiles, map[string]*fwksched.ProfileRunResult{})
			if keys(picked) != tc.wantRun {
				t.Fatalf("picked %q, want %q", keys(picked), tc.wantRun)
			}
			results := map[string]*fwksched.ProfileRunResult{}
			for name := range picked {
				results[name] = &fwksched.ProfileRunResult{}
			}
			if again := h.Pick(context.Background(), nil, req, profiles, results); len(again) != 0 && len(results) > 0 {
				t.Fatalf("a second pick ran %q", keys(again))
			}
			res, err := h.ProcessResults(context.Background(), nil, req, results)
			if tc.wantStatus != 0 {
				a, ok := contract.AnswerOf(err)
				if !ok || a.Status != tc.wantStatus || a.Cause != contract.CauseUnknownProfile || !strings.Contains(a.Message, h.params.HeaderName) {
					t.Fatalf("err %v, want a %d answer naming the header", err, tc.wantStatus)
				}
				return
			}
			if err != nil || res.PrimaryProfileName != tc.wantRun {
				t.Fatalf("result %+v, err %v; want primary %q", res, err, tc.wantRun)
			}
		})
	}
}

func TestFailedProfileRunIsAnError(t *testing.T) {
	h, _ := newHandler(Type, "", nil)
	if _, err := h.ProcessResults(context.Background(), nil, &fwksched.LLMRequest{}, map[string]*fwksched.ProfileRunResult{"decode": nil}); err == nil {
		t.Fatal("a profile that failed to run made a result")
	}
}
