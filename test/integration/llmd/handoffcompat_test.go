package llmd

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
)

// pool builds llm-d-labelled pods from "name role value" triples, each declaring value under
// key, on consecutive loopback IPs from 127.0.0.<first>.
func pool(first int, key string, pods ...string) []pod {
	out := make([]pod, len(pods))
	for i, p := range pods {
		f := strings.Fields(p)
		out[i] = pod{name: f[0], ip: fmt.Sprintf("127.0.0.%d", first+i), labels: labels("llm-d.ai/role", f[1], key, f[2])}
	}
	return out
}

// handoffCase is a pool and what every one of a few requests must get: the decode pod, the
// prefill pod ("" = no prefill leg), or an immediate status.
type handoffCase struct {
	name, config         string
	pods                 []pod
	decode, prefill      string
	status               int
	longPrompt, repeated bool
}

// An incompatible prefill/decode pair is never made, through the real EPP over ext_proc: the
// second stage keeps only pods that can exchange KV with the first stage's pick, and with none
// the request is served without a prefill leg (local-prefill) or answered 503 (error), for
// handoff-compat-filter under both stage orders and for aibrix-pd-pair in the recommended
// config.
func TestHandoffCompatibility(t *testing.T) {
	rev, conn := handoffcompat.LabelRevision, handoffcompat.LabelConnector
	const recommended = "../../../config/recommended.yaml"
	const first, prefillFirst = "testdata/handoffcompat/decode-first-local-prefill.yaml", "testdata/handoffcompat/prefill-first-local-prefill.yaml"
	cases := []handoffCase{
		{name: "decode first: only the compatible prefill pod", config: first, repeated: true,
			pods: pool(231, rev, "d-a decode a", "p-a prefill a", "p-b prefill b", "p-b2 prefill b"), decode: "d-a", prefill: "p-a"},
		{name: "decode first, none compatible: local prefill", config: first,
			pods: pool(235, rev, "d-b decode b", "p-a prefill a"), decode: "d-b"},
		{name: "decode first, none compatible: 503", config: "testdata/handoffcompat/decode-first-error.yaml",
			pods: pool(237, rev, "d-b decode b", "p-a prefill a"), status: http.StatusServiceUnavailable},
		{name: "prefill first: only the compatible decode pod", config: prefillFirst, repeated: true,
			pods: pool(239, rev, "p-a prefill a", "d-a decode a", "d-b decode b", "d-b2 decode b"), decode: "d-a", prefill: "p-a"},
		{name: "prefill first, none compatible: local prefill", config: prefillFirst,
			pods: pool(243, rev, "p-a prefill a", "d-b decode b"), decode: "d-b"},
		{name: "aibrix-pd-pair: pairs by connector", config: recommended, longPrompt: true, repeated: true,
			pods: pool(245, conn, "p-nixl prefill nixl", "d-moon decode mooncake", "p-moon prefill Mooncake", "p-nixl2 prefill nixl"), decode: "d-moon", prefill: "p-moon"},
		{name: "aibrix-pd-pair, none compatible: decode-only", config: recommended, longPrompt: true,
			pods: pool(249, rev, "p-a prefill a", "d-b decode b"), decode: "d-b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ips := map[string]string{}
			for _, p := range tc.pods {
				ips[p.name] = p.ip
			}
			e := startEPP(t, tc.config, tc.pods)
			prompt := "which pod"
			if tc.longPrompt {
				prompt = strings.Repeat("a prompt no pod holds, long enough to be prefilled remotely. ", 8)
			}
			n := 1
			if tc.repeated {
				n = 12
			}
			for i := range n {
				// a prompt of its own each time: no pod holds it, so it is prefilled remotely
				a := e.send(t, "/v1/completions", nil, completionBody(strconv.Itoa(i)+" "+prompt))
				if tc.status != 0 {
					if a.immediate != tc.status || !strings.Contains(a.body, "exchange KV") {
						t.Fatalf("want %d, no compatible pair: %s", tc.status, a)
					}
					continue
				}
				if a.destination != hostPort(ips[tc.decode], e.port) {
					t.Fatalf("request %d: want decode %s: %s", i, tc.decode, a)
				}
				prefillIP, _, _ := strings.Cut(a.set["x-prefiller-host-port"], ":")
				if prefillIP != ips[tc.prefill] {
					t.Fatalf("request %d: want prefill %q: %s", i, tc.prefill, a)
				}
			}
		})
	}
}
