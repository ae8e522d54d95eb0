package llmd

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// header-profile-handler through the real ext_proc stream: the header's profile runs alone, a
// missing header runs the default (decode), and a profile the config lacks is a 400 with an
// OpenAI JSON error and its cause. The pre-merge alias reads EPP-Phase.
func TestHeaderProfileHandler(t *testing.T) {
	for _, tc := range []struct {
		config, header string
		ips            [2]string
	}{
		{"testdata/v011/header-profile.yaml", "EPP-Profile", [2]string{"127.0.0.141", "127.0.0.142"}},
		{"testdata/v011/header-phase-profile.yaml", "EPP-Phase", [2]string{"127.0.0.143", "127.0.0.144"}},
	} {
		t.Run(tc.header, func(t *testing.T) {
			e := startEPP(t, tc.config, []pod{
				{name: "prefill-0", ip: tc.ips[0], labels: map[string]string{role: "prefill"}},
				{name: "decode-0", ip: tc.ips[1], labels: map[string]string{role: "decode"}},
			})
			body := completionBody("which stage runs")
			if a := e.send(t, "/v1/completions", map[string]string{tc.header: "prefill"}, body); a.destination != hostPort(tc.ips[0], e.port) {
				t.Fatalf("%s: prefill must schedule on the prefill pod: %s", tc.header, a)
			}
			if a := e.send(t, "/v1/completions", nil, body); a.destination != hostPort(tc.ips[1], e.port) {
				t.Fatalf("no header must run the default profile, decode: %s", a)
			}
			a, done, err := e.Open("/v1/completions", map[string]string{tc.header: "verify"}, body, 10*time.Second)
			done()
			if err != nil {
				t.Fatal(err)
			}
			var msg struct {
				Error struct {
					Message string `json:"message"`
					Code    int    `json:"code"`
				} `json:"error"`
			}
			if a.Immediate != 400 || json.Unmarshal([]byte(a.Body), &msg) != nil || msg.Error.Code != 400 || msg.Error.Message == "" {
				t.Fatalf("an unknown profile must be a 400 with an OpenAI error body: %+v", a)
			}
			if got := a.ImmediateHeaders[protocol.HeaderErrorCause]; got != "unknown_profile" {
				t.Fatalf("cause header %q, want unknown_profile: %+v", got, a)
			}
		})
	}
}
