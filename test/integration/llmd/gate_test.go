package llmd

import (
	"strings"
	"testing"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestConditionalDecode(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/conditional-decode.yaml", []pod{
		{name: "decode-0", ip: "127.0.0.71", labels: map[string]string{role: "decode"}},
		{name: "decode-1", ip: "127.0.0.72", labels: map[string]string{role: "decode"}},
	})
	prefer := map[string]string{"prefer": "return=minimal, If-Available;hint=1"}
	prompt := longPrompt("conditional")

	a := e.send(t, "/v1/completions", prefer, completionBody(prompt))
	if a.immediate != 412 || a.body != protocol.ConditionalDecodeBody {
		t.Fatalf("uncached conditional request must get 412: %s", a)
	}
	for k := range a.set {
		if strings.HasPrefix(k, "x-pdgate-internal-") {
			t.Fatalf("internal header leaked: %s", a)
		}
	}
	if r := e.send(t, "/v1/completions", map[string]string{"prefer": "return=minimal"}, completionBody(prompt)); r.immediate != 0 {
		t.Fatalf("an unrelated Prefer must be forwarded: %s", r)
	}
	// Once a decode pod holds the prompt, the same conditional request is forwarded to it.
	a = until(t, "warm cache forwards the conditional request",
		func() answer { return e.send(t, "/v1/completions", prefer, completionBody(prompt)) },
		func(a answer) bool { return a.immediate == 0 })
	if a.destination == "" {
		t.Fatalf("forwarded without destination: %s", a)
	}
	if short := e.send(t, "/v1/completions", prefer, completionBody("hi")); short.immediate != 0 {
		t.Fatalf("a prompt shorter than nonCachedTokens is always covered: %s", short)
	}
}

func TestConditionalDecodeWithPD(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/pd.yaml", []pod{
		{name: "prefill-0", ip: "127.0.0.73", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.74", labels: map[string]string{role: "decode"}},
	})
	prompt := longPrompt("cd-pd")
	a := e.send(t, "/v1/completions", map[string]string{"Prefer": "if-available"}, completionBody(prompt))
	if a.immediate != 412 || a.body != protocol.ConditionalDecodeBody {
		t.Fatalf("P/D config: the decider is also the gate: %s", a)
	}
	// The rejected request left no trace: the decode pod is not believed to hold the prompt,
	// so the coordinator's follow-up (same prompt, no Prefer) still gets a remote prefill.
	e.send(t, "/v1/completions", nil, completionBody("an unrelated short request"))
	a = e.send(t, "/v1/completions", nil, completionBody(prompt))
	if a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.73", e.port) {
		t.Fatalf("follow-up after a 412 must be P/D: %s", a)
	}
	// Positive control: a forwarded request does teach the index.
	until(t, "forwarded request warms the cache", func() answer {
		return e.send(t, "/v1/completions", map[string]string{"Prefer": "if-available"}, completionBody(prompt))
	}, func(a answer) bool { return a.immediate == 0 })
}

func TestConditionalDecodeWithoutDeciderForwards(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/decode-only.yaml", []pod{
		{name: "decode-0", ip: "127.0.0.75", labels: map[string]string{role: "decode"}},
	})
	if a := e.send(t, "/v1/completions", map[string]string{"prefer": "if-available"}, completionBody(longPrompt("no-gate"))); a.immediate != 0 {
		t.Fatalf("no decider configured must forward: %s", a)
	}
}

// Spoofed routing headers sent by a client never reach the decode pod: they are neither set
// nor left in place (RemoveHeaders), whether or not the stage ran.
func TestSpoofedRoutingHeadersNeverReachUpstream(t *testing.T) {
	spoof := map[string]string{
		protocol.HeaderPrefillerHostPort:     "10.66.66.66:8000",
		"X-Encoder-Hosts-Ports":              "10.66.66.67:8000,10.66.66.68:8000",
		protocol.HeaderPrefillerEngine:       "evil",
		"x-pdgate-internal-immediate-status": "200",
		"x-pdgate-internal-" + "x":           "y",
	}
	check := func(t *testing.T, a answer, wantPrefill string) {
		t.Helper()
		if a.immediate != 0 {
			t.Fatalf("spoofed internal header must not produce an immediate answer: %s", a)
		}
		for k, v := range a.set {
			if strings.Contains(v, "10.66.66.") || v == "evil" || strings.HasPrefix(k, "x-pdgate-internal-") {
				t.Fatalf("spoofed value reached upstream: %s: %s", k, v)
			}
		}
		if got := a.set[protocol.HeaderPrefillerHostPort]; got != wantPrefill {
			t.Fatalf("x-prefiller-host-port = %q, want %q (%s)", got, wantPrefill, a)
		}
		if wantPrefill == "" && !a.removed[protocol.HeaderPrefillerHostPort] {
			t.Fatalf("x-prefiller-host-port not removed: %s", a)
		}
		if !a.removed[protocol.HeaderEncoderHostsPorts] {
			t.Fatalf("x-encoder-hosts-ports not removed: %s", a)
		}
	}
	t.Run("decode-only", func(t *testing.T) {
		e := startEPP(t, "../../../config/llmd/decode-only.yaml", []pod{{name: "decode-0", ip: "127.0.0.81", labels: map[string]string{role: "decode"}}})
		check(t, e.send(t, "/v1/completions", spoof, completionBody(longPrompt("spoof-d"))), "")
	})
	t.Run("P/D overwrites", func(t *testing.T) {
		e := startEPP(t, "../../../config/llmd/pd.yaml", []pod{
			{name: "prefill-0", ip: "127.0.0.82", labels: map[string]string{role: "prefill"}},
			{name: "decode-0", ip: "127.0.0.83", labels: map[string]string{role: "decode"}},
		})
		check(t, e.send(t, "/v1/completions", spoof, completionBody(longPrompt("spoof-pd"))), hostPort("127.0.0.82", e.port))
		// Short prompt: P/D skipped, the spoofed prefill header is removed.
		check(t, e.send(t, "/v1/completions", spoof, completionBody("hi")), "")
	})
}
