package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/test/testsupport"
)

// pumpHorizon: the pump only fires timers due within this much model time, so long waits
// (hang bounds, long KV waits) stay pending until a test advances past them itself.
const pumpHorizon = time.Minute

// newPump returns a fake clock that a goroutine advances to the next due timer whenever
// one is pending: model time runs as fast as events happen, and never reads the wall clock.
func newPump(t *testing.T) *batching.FakeClock {
	t.Helper()
	clk := batching.NewFakeClock()
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if d, ok := clk.NextIn(); ok && d <= pumpHorizon {
				clk.Advance(d)
				continue
			}
			time.Sleep(50 * time.Microsecond)
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return clk
}

func startSim(t *testing.T, clk batching.Clock, o Options) *Instance {
	t.Helper()
	o.Clock = clk
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	in, err := Start(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(in.Close)
	return in
}

type result struct {
	status int
	header http.Header
	body   map[string]any
	raw    []byte
	err    error
}

var testClient = &http.Client{Timeout: 20 * time.Second}

func post(t *testing.T, url string, body any, hdr map[string]string) result {
	t.Helper()
	return postCtx(context.Background(), t, url, body, hdr)
}

func postCtx(ctx context.Context, t *testing.T, url string, body any, hdr map[string]string) result {
	t.Helper()
	req, err := testsupport.JSONRequest(ctx, url, hdr, body)
	if err != nil {
		return result{err: err}
	}
	resp, err := testClient.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, header: resp.Header, raw: raw, err: err}
	_ = json.Unmarshal(raw, &r.body)
	return r
}

// sseEvents splits an SSE body into its data payloads.
func sseEvents(raw []byte) []string {
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			out = append(out, d)
		}
	}
	return out
}

// contentDeltas counts streamed chat tokens.
func contentDeltas(raw []byte) (n int, text string, done bool) {
	for _, ev := range sseEvents(raw) {
		if ev == "[DONE]" {
			done = true
			continue
		}
		var c struct {
			Choices []struct {
				Delta struct {
					Content *string `json:"content"`
				} `json:"delta"`
			} `json:"choices"`
		}
		if json.Unmarshal([]byte(ev), &c) == nil && len(c.Choices) == 1 && c.Choices[0].Delta.Content != nil && *c.Choices[0].Delta.Content != "" {
			n++
			text += *c.Choices[0].Delta.Content
		}
	}
	return n, text, done
}

func chat(content string, maxTokens int, extra map[string]any) map[string]any {
	b := map[string]any{"model": "meta-llama/Llama-3.1-8B-Instruct",
		"messages": []any{map[string]any{"role": "user", "content": content}}, "max_tokens": maxTokens}
	for k, v := range extra {
		b[k] = v
	}
	return b
}

func field(t *testing.T, m map[string]any, path ...any) any {
	t.Helper()
	var cur any = m
	for _, p := range path {
		switch k := p.(type) {
		case string:
			mm, ok := cur.(map[string]any)
			if !ok {
				t.Fatalf("path %v: not an object at %q", path, k)
			}
			cur = mm[k]
		case int:
			arr, ok := cur.([]any)
			if !ok || k >= len(arr) {
				t.Fatalf("path %v: not an array at %d", path, k)
			}
			cur = arr[k]
		}
	}
	return cur
}

func messageText(t *testing.T, body map[string]any) string {
	t.Helper()
	s, _ := field(t, body, "choices", 0, "message", "content").(string)
	return s
}

const longPrompt = "Explain how prefill/decode disaggregation moves the KV cache between servers and why it removes interference."

func waitABit() { time.Sleep(100 * time.Microsecond) }
