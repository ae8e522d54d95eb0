package extproc

import (
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// The prefill-release header goes upstream only when the option is set and the request
// leaves with a prefill target; a client's copy never survives (dropped before the plugins,
// removed upstream when the EPP writes none, overwritten when it does).
func TestPrefillReleaseHeader(t *testing.T) {
	release := func(id string) string {
		return "http://10.0.0.9:9090" + protocol.PrefillReleasePath + "?id=" + id + "&sig=ab"
	}
	spoof := map[string]string{protocol.HeaderPrefillRelease: "http://evil:1/x", "x-request-id": "req-7"}
	withPrefill := &hooksPlugin{setHeader: map[string]string{protocol.HeaderPrefillerHostPort: "127.0.0.2:8000"}}
	clearsPrefill := &hooksPlugin{setHeader: map[string]string{protocol.HeaderPrefillerHostPort: ""}}
	tests := []struct {
		name    string
		hooks   *hooksPlugin
		opt     func(string) string
		headers map[string]string
		want    string // the header's value upstream; "" = removed
	}{
		{"option and prefill target: the EPP's callback", withPrefill, release, map[string]string{"x-request-id": "req-7"},
			release("req-7")},
		{"option and prefill target: a client's copy is overwritten", withPrefill, release, spoof, release("req-7")},
		{"option, no prefill target: removed", nil, release, spoof, ""},
		{"option, prefill target cleared by a plugin: removed", clearsPrefill, release, spoof, ""},
		{"no option, prefill target: removed", withPrefill, nil, spoof, ""},
		{"no option, no prefill target: removed", nil, nil, spoof, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := start(t, &fixture{hooks: tt.hooks, opts: Options{PrefillRelease: tt.opt}})
			r := f.run(t, tt.headers, completion)
			if r.immediate != 0 {
				t.Fatalf("immediate %d %s", r.immediate, r.body)
			}
			if _, seen := f.sched.seen[protocol.HeaderPrefillRelease]; seen {
				t.Fatal("a plugin saw the client's prefill-release header")
			}
			got, set := r.set[protocol.HeaderPrefillRelease]
			if tt.want == "" {
				if set || !r.removed[protocol.HeaderPrefillRelease] {
					t.Fatalf("want the header removed: set %q (%v) removed %v", got, set, r.removed)
				}
				return
			}
			if got != tt.want || r.removed[protocol.HeaderPrefillRelease] {
				t.Fatalf("header %q (removed %v), want %q", got, r.removed[protocol.HeaderPrefillRelease], tt.want)
			}
		})
	}
}
