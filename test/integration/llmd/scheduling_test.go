package llmd

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

const role = "llm-d.ai/role"

func completionBody(prompt string) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 8})
	return string(b)
}

func chatBody(t *testing.T, content any) string {
	t.Helper()
	b, err := json.Marshal(map[string]any{"model": "m", "messages": []map[string]any{{"role": "user", "content": content}}})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// longPrompt is well above nonCachedTokens (16) in estimated tokens (bytes/4).
func longPrompt(tag string) string {
	return tag + " " + strings.Repeat("the quick brown fox jumps over the lazy dog ", 20)
}

// until repeats send until ok holds, bounded in count and time: GIE's prefix index is updated
// asynchronously after each PreRequest.
func until(t *testing.T, what string, send func() answer, ok func(answer) bool) answer {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	var a answer
	for i := 0; i < 500 && time.Now().Before(deadline); i++ {
		if a = send(); ok(a) {
			return a
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: never happened; last %s", what, a)
	return a
}

func hostPort(ip string, port int) string { return fmt.Sprintf("%s:%d", ip, port) }

func TestPD1P1D(t *testing.T) {
	pods := []pod{
		{name: "prefill-0", ip: "127.0.0.11", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.12", labels: map[string]string{role: "decode"}},
	}
	e := startEPP(t, "../../../config/llmd/pd.yaml", pods)
	decode, prefill := hostPort("127.0.0.12", e.port), hostPort("127.0.0.11", e.port)

	prompt := longPrompt("1p1d")
	a := e.send(t, "/v1/completions", nil, completionBody(prompt))
	if a.immediate != 0 || a.destination != decode || a.set[protocol.HeaderPrefillerHostPort] != prefill {
		t.Fatalf("long uncached prompt must be P/D: %s", a)
	}
	// The same prompt again: the decode pod now holds it, so the request stays decode-only.
	a = until(t, "cache hit makes it decode-only", func() answer { return e.send(t, "/v1/completions", nil, completionBody(prompt)) },
		func(a answer) bool { _, p := a.set[protocol.HeaderPrefillerHostPort]; return !p })
	if a.destination != decode {
		t.Fatalf("decode-only must still go to the decode pod: %s", a)
	}

	short := e.send(t, "/v1/completions", nil, completionBody("hi"))
	if _, p := short.set[protocol.HeaderPrefillerHostPort]; p || short.destination != decode {
		t.Fatalf("short prompt must be decode-only: %s", short)
	}
}

func TestPD1P2D(t *testing.T) {
	pods := []pod{
		{name: "prefill-0", ip: "127.0.0.21", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.22", labels: map[string]string{role: "decode"}},
		{name: "decode-1", ip: "127.0.0.23", labels: map[string]string{role: "decode"}},
	}
	e := startEPP(t, "../../../config/llmd/pd.yaml", pods)
	decodes := map[string]bool{hostPort("127.0.0.22", e.port): true, hostPort("127.0.0.23", e.port): true}
	for i := 0; i < 4; i++ {
		a := e.send(t, "/v1/completions", nil, completionBody(longPrompt(fmt.Sprintf("1p2d-%d", i))))
		if !decodes[a.destination] || a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.21", e.port) {
			t.Fatalf("request %d: %s", i, a)
		}
	}
}

func TestPDRolelessPodActsAsDecodeAndNoDecodeFails(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/pd.yaml", []pod{
		{name: "prefill-0", ip: "127.0.0.31", labels: map[string]string{role: "prefill"}},
		{name: "plain-0", ip: "127.0.0.32"},
	})
	a := e.send(t, "/v1/completions", nil, completionBody(longPrompt("roleless")))
	if a.destination != hostPort("127.0.0.32", e.port) || a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.31", e.port) {
		t.Fatalf("role-less pod must act as decode: %s", a)
	}

	only := startEPP(t, "../../../config/llmd/pd.yaml", []pod{{name: "prefill-0", ip: "127.0.0.33", labels: map[string]string{role: "prefill"}}})
	a = only.send(t, "/v1/completions", nil, completionBody(longPrompt("nodecode")))
	if a.immediate == 0 || !strings.Contains(a.body, "failed to find") {
		t.Fatalf("no decode pod must fail the request: %s", a)
	}
}

func imageContent(url string) []map[string]any {
	return []map[string]any{{"type": "text", "text": "describe"}, {"type": "image_url", "image_url": map[string]string{"url": url}}}
}

func TestEPD(t *testing.T) {
	pods := []pod{
		{name: "encode-0", ip: "127.0.0.41", labels: map[string]string{role: "encode"}},
		{name: "encode-1", ip: "127.0.0.42", labels: map[string]string{role: "encode"}},
		{name: "prefill-0", ip: "127.0.0.43", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.44", labels: map[string]string{role: "decode"}},
	}
	e := startEPP(t, "../../../config/llmd/e-p-d.yaml", pods)
	decode, prefill := hostPort("127.0.0.44", e.port), hostPort("127.0.0.43", e.port)

	a := e.send(t, "/v1/chat/completions", nil, chatBody(t, imageContent("https://img.example/cat.png")))
	enc := strings.Split(a.set[protocol.HeaderEncoderHostsPorts], ",")
	if a.destination != decode || a.set[protocol.HeaderPrefillerHostPort] != prefill || len(enc) != 2 {
		t.Fatalf("multimodal uncached request must be E/P/D with both encoders: %s", a)
	}
	text := e.send(t, "/v1/chat/completions", nil, chatBody(t, longPrompt("text only")))
	if _, has := text.set[protocol.HeaderEncoderHostsPorts]; has || text.set[protocol.HeaderPrefillerHostPort] != prefill {
		t.Fatalf("text-only request must skip encode and run prefill: %s", text)
	}
}

func TestEPDWithoutPrefill(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/e-pd.yaml", []pod{
		{name: "encode-0", ip: "127.0.0.51", labels: map[string]string{role: "encode"}},
		{name: "decode-0", ip: "127.0.0.52", labels: map[string]string{role: "decode"}},
	})
	a := e.send(t, "/v1/chat/completions", nil, chatBody(t, imageContent("https://img.example/dog.png")))
	if a.set[protocol.HeaderEncoderHostsPorts] != hostPort("127.0.0.51", e.port) || a.destination != hostPort("127.0.0.52", e.port) {
		t.Fatalf("E/PD: %s", a)
	}
	if _, p := a.set[protocol.HeaderPrefillerHostPort]; p {
		t.Fatalf("E/PD has no prefill stage: %s", a)
	}
}

func TestDeprecatedPDConfig(t *testing.T) {
	e := startEPP(t, "../../../config/llmd/pd-deprecated.yaml", []pod{
		{name: "prefill-0", ip: "127.0.0.61", labels: map[string]string{role: "prefill"}},
		{name: "decode-0", ip: "127.0.0.62", labels: map[string]string{role: "decode"}},
	})
	a := e.send(t, "/v1/completions", nil, completionBody(longPrompt("deprecated")))
	if a.destination != hostPort("127.0.0.62", e.port) || a.set[protocol.HeaderPrefillerHostPort] != hostPort("127.0.0.61", e.port) {
		t.Fatalf("pd-profile-handler + prefill-header-handler: %s", a)
	}
}
