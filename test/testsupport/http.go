package testsupport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"
)

// PostJSON posts body (a string or []byte as is, anything else JSON-encoded) to url with the
// given headers and returns the status, the response headers and the body. Transport errors
// fail the test.
func PostJSON(t testing.TB, url string, hdr map[string]string, body any) (int, http.Header, string) {
	t.Helper()
	req, err := JSONRequest(context.Background(), url, hdr, body)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Timeout: 60 * time.Second}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, resp.Header, string(out)
}

// JSONRequest builds a POST of body (a string or []byte as is, anything else JSON-encoded) to
// url with Content-Type application/json and the given headers; callers that stream the answer
// or run load loops send it themselves.
func JSONRequest(ctx context.Context, url string, hdr map[string]string, body any) (*http.Request, error) {
	var raw []byte
	switch b := body.(type) {
	case string:
		raw = []byte(b)
	case []byte:
		raw = b
	default:
		var err error
		if raw, err = json.Marshal(b); err != nil {
			return nil, fmt.Errorf("encoding the request body: %w", err)
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("building the request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	return req, nil
}

// ChatBody is an OpenAI chat-completions request for model with one user message, plus extra
// top-level fields.
func ChatBody(model, content string, extra map[string]any) map[string]any {
	b := map[string]any{"model": model, "messages": []map[string]any{{"role": "user", "content": content}}}
	for k, v := range extra {
		b[k] = v
	}
	return b
}
