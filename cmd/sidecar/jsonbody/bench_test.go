package jsonbody

import (
	"fmt"
	"strings"
	"testing"
)

// chatBody is a chat request of about n bytes whose prompt has escapes and non-ASCII text.
func chatBody(n int) []byte {
	text := strings.Repeat("lorem ipsum <b>&</b> \u00e9\\n ", n/24+1)[:n]
	return []byte(`{"model":"meta-llama/Llama-3.1-8B-Instruct","max_tokens":128,"stream":true,"stream_options":{"include_usage":true},"messages":[{"role":"system","content":"` +
		text + `"},{"role":"user","content":"Summarise the document."}],"temperature":0.7}`)
}

// sidecarEdits is what the sidecar does with one P/D request body: parse, refuse duplicated
// control keys, build the prefill body (sanitised copy, one token, no streaming) and the
// decode body (sanitised copy with the KV parameters), and render both.
func sidecarEdits(parse func([]byte) (*Object, error), body []byte) (int, error) {
	o, err := parse(body)
	if err != nil {
		return 0, err
	}
	if k, dup := o.Duplicated("stream", "stream_options", "max_tokens", "max_completion_tokens", "kv_transfer_params"); dup {
		return 0, fmt.Errorf("duplicate %s", k)
	}
	kvKeys := []string{"kv_transfer_params", "disagg_prefill_resp", "bootstrap_host", "bootstrap_port", "bootstrap_room", "disaggregated_params"}
	prefill := o.Clone()
	for _, k := range kvKeys {
		prefill.Delete(k)
	}
	prefill.SetInt("max_tokens", 1)
	prefill.SetInt("max_completion_tokens", 1)
	prefill.SetBool("stream", false)
	prefill.Delete("stream_options")
	prefill.Delete("min_tokens")
	decode := o.Clone()
	for _, k := range kvKeys {
		decode.Delete(k)
	}
	kv := New()
	kv.SetBool("do_remote_prefill", true)
	_ = kv.Set("remote_host", "10.0.0.7")
	kv.SetInt("remote_port", 5600)
	decode.SetObject("kv_transfer_params", kv)
	return len(prefill.Bytes()) + len(decode.Bytes()), nil
}

// BenchmarkParseEdit compares the encoding/json implementation (parseStd) with Parse on the
// sidecar's per-request edits, in the same run.
func BenchmarkParseEdit(b *testing.B) {
	for _, size := range []int{1 << 10, 16 << 10, 220 << 10} {
		body := chatBody(size)
		for _, impl := range []struct {
			name  string
			parse func([]byte) (*Object, error)
		}{{"encoding-json", parseStd}, {"jsontext", Parse}} {
			b.Run(fmt.Sprintf("%dKB/%s", size>>10, impl.name), func(b *testing.B) {
				b.ReportAllocs()
				b.SetBytes(int64(len(body)))
				for b.Loop() {
					if _, err := sidecarEdits(impl.parse, body); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
