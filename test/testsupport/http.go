package testsupport

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
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

// MetricSample scrapes the Prometheus text page at url and returns the value of sample (a
// metric name with its labels as the page writes them), 0 when the page has no such line.
func MetricSample(t testing.TB, url, sample string) float64 {
	t.Helper()
	for _, line := range strings.Split(Scrape(t, url), "\n") {
		if rest, ok := strings.CutPrefix(line, sample+" "); ok {
			v, err := strconv.ParseFloat(strings.Fields(rest)[0], 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", url, line, err)
			}
			return v
		}
	}
	return 0
}

// MetricFamilies scrapes the Prometheus text page at url and returns its families by name.
func MetricFamilies(t testing.TB, url string) map[string]*dto.MetricFamily {
	t.Helper()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(Scrape(t, url)))
	if err != nil {
		t.Fatalf("parsing %s: %v", url, err)
	}
	return fams
}

// Get fetches url and returns the status and at most 8 MiB of the body, giving up after 5 s:
// the health polls and metrics reads of the e2e suites, which must not hang on a stuck process.
func Get(ctx context.Context, url string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, nil, err
	}
	resp, err := getClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 8<<20))
	return resp.StatusCode, b, err
}

var getClient = &http.Client{Timeout: 5 * time.Second}

// Scrape returns the page at url (a Prometheus text page, typically).
func Scrape(t testing.TB, url string) string {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading %s: %v", url, err)
	}
	return string(b)
}
