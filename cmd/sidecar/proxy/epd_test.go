package proxy

import (
	"net/http"
	"strings"
	"testing"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

const mmBody = `{"model":"m","stream":true,"messages":[{"role":"user","content":[
 {"type":"text","text":"compare"},
 {"type":"image_url","image_url":{"url":"http://img/a.png"}},
 {"type":"image_url","image_url":{"url":"http://img/a.png"}},
 {"type":"video_url","video_url":{"url":"http://vid/b.mp4"}},
 {"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}},
 {"type":"input_audio","input_audio":{"data":"AAAA","format":"wav"}}]},
 {"role":"user","content":"plain text"},
 {"role":"user","content":[{"type":"audio_url","audio_url":{"url":"http://aud/c.mp3"}}]}]}`

func TestMultimodalItems(t *testing.T) {
	obj, err := jsonbody.Parse([]byte(mmBody))
	if err != nil {
		t.Fatal(err)
	}
	items, err := multimodalItems(obj)
	if err != nil {
		t.Fatal(err)
	}
	// a.png once, b.mp4, two inline audios (never deduplicated), c.mp3.
	if len(items) != 5 {
		t.Fatalf("items %d: %s", len(items), items)
	}
}

func TestEncodeFanOut(t *testing.T) {
	encA := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 200, map[string]any{}) })
	encB := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 200, map[string]any{}) })
	pre := newFake(t, prefillOK)
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec, pre.hp(), encA.hp(), encB.hp()))
	resp, body := env.post(t, "/v1/chat/completions", mmBody, map[string]string{
		protocol.HeaderPrefillerHostPort: pre.hp().String(),
		protocol.HeaderEncoderHostsPorts: encA.hp().String() + ", 10.6.6.6:9 ," + encB.hp().String(),
		"X-Request-Id":                   "r1",
	})
	if resp.StatusCode != 200 || !strings.Contains(body, "[DONE]") {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	a, b := encA.requests(), encB.requests()
	if len(a)+len(b) != 5 || len(a) < 2 || len(b) < 2 {
		t.Fatalf("encode legs a=%d b=%d, want 5 spread round-robin", len(a), len(b))
	}
	for _, e := range append(a, b...) {
		msgs := e.Body["messages"].([]any)
		content := msgs[0].(map[string]any)["content"].([]any)
		if len(msgs) != 1 || len(content) != 1 || e.Body["max_tokens"] != 1.0 || e.Body["stream"] != false || e.Path != "/v1/chat/completions" {
			t.Errorf("encode body %s", e.Raw)
		}
		if !strings.HasPrefix(e.Header.Get("X-Request-Id"), "r1-enc-") {
			t.Errorf("encode request id %q", e.Header.Get("X-Request-Id"))
		}
	}
	if len(pre.requests()) != 1 || len(dec.requests()) != 1 {
		t.Fatal("prefill and decode must follow the encode legs")
	}
	if got := counter(env.metrics.AllowlistRejections.WithLabelValues("encode")); got != 1 {
		t.Errorf("dropped encoder not counted: %v", got)
	}
}

func TestEncodeFailure(t *testing.T) {
	enc := newFake(t, func(w http.ResponseWriter, _ *http.Request, _ map[string]any) { jsonAnswer(w, 500, map[string]any{}) })
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec, enc.hp()))
	resp, body := env.post(t, "/v1/chat/completions", mmBody, map[string]string{protocol.HeaderEncoderHostsPorts: enc.hp().String()})
	if resp.StatusCode != 502 || !strings.Contains(body, "encode request failed") || len(dec.requests()) != 0 {
		t.Fatalf("status %d: %s", resp.StatusCode, body)
	}
	// The failing leg is named like the prefill and decode ones, and only that one.
	if resp.Header.Get("x-error-pd-encode") != "true" || resp.Header.Get(protocol.HeaderErrorPrefill) != "" ||
		resp.Header.Get(protocol.HeaderErrorDecode) != "" {
		t.Fatalf("error headers %v, want only x-error-pd-encode: true", resp.Header)
	}
}

func TestEncodersAllRefusedMeansDecodeOnly(t *testing.T) {
	dec := newFake(t, decodeOK)
	env := startProxy(t, testConfig(dec))
	resp, _ := env.post(t, "/v1/chat/completions", mmBody, map[string]string{protocol.HeaderEncoderHostsPorts: "10.0.0.1:1,bad host"})
	if resp.StatusCode != 200 || len(dec.requests()) != 1 {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

func FuzzMultimodalItems(f *testing.F) {
	f.Add([]byte(mmBody))
	f.Add([]byte(`{"messages":[{"content":[{"type":"image_url","image_url":"x"}]}]}`))
	f.Add([]byte(`{"messages":{"a":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		obj, err := jsonbody.Parse(b)
		if err != nil {
			return
		}
		items, err := multimodalItems(obj)
		if err != nil {
			return
		}
		for _, it := range items {
			if _, err := jsonbody.Parse(it); err != nil {
				t.Fatalf("item is not an object: %s", it)
			}
		}
	})
}
