package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Prefill outcomes (x-pdgate-prefill-outcome) and failure classes.
const (
	outcomeOK        = protocol.PrefillOK
	outcomeFailed    = protocol.PrefillFailed
	outcomeSkipped   = protocol.PrefillSkipped
	outcomeFallback  = protocol.PrefillFallbackLocal
	outcomeAlternate = protocol.PrefillAlternate

	classSetup       = "request_setup"
	classTimeout     = "timeout"
	classCanceled    = "canceled"
	classTransport   = "transport"
	classHTTP        = "http_status"
	classBadResponse = "bad_response"
	// classIncomplete: the prefill answered 200 but says its KV was not (all) produced.
	classIncomplete = "incomplete_prefill"

	// Reasons of pdgate_sidecar_prefill_diverted_total beyond the failure classes.
	reasonAllowlist  = "allowlist"
	reasonBadHeader  = "bad_header"
	reasonNoKVParams = "no_kv_params"
	reasonCacheHit   = "cache_hit"

	// aibrixPrefillFailure and aibrixDecodeWatchdog are AIBrix's status labels of
	// gateway_request_model_fail_total.
	aibrixPrefillFailure = "pd_prefill_failure"
	aibrixDecodeWatchdog = "pd_decode_watchdog"
)

// maxLegResponse caps a buffered prefill/encode response (prompt_token_ids can be large).
const maxLegResponse = 64 << 20

// legError is a failed encode/prefill leg.
type legError struct {
	class  string
	status int
	header http.Header
	body   []byte
	err    error
}

func (e *legError) Error() string {
	if e.class == classHTTP {
		return fmt.Sprintf("%s: status %d: %s", e.class, e.status, truncate(strings.TrimSpace(string(e.body)), 200))
	}
	return fmt.Sprintf("%s: %v", e.class, e.err)
}

// terminal reports whether the failure means the KV was not produced. A 200 with an
// unparseable body still completed the transfer.
func (e *legError) terminal() bool { return e.class != classBadResponse }

func (e *legError) retryable() bool {
	switch e.class {
	case classTransport, classBadResponse, classIncomplete:
		return true
	case classHTTP:
		return e.status >= 500 || e.status == http.StatusTooManyRequests
	}
	return false
}

// clientError reports a prefiller 4xx that says the request itself is bad; it is returned to
// the client as is under every policy (the decode engine would refuse it too).
func (e *legError) clientError() bool {
	return e.class == classHTTP && e.status >= 400 && e.status < 500 && e.status != http.StatusTooManyRequests
}

var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// legHeaders derives an outgoing leg's headers from the client's: hop-by-hop headers and
// Accept-Encoding are dropped (the sidecar rewrites bodies, so it wants them uncompressed).
func legHeaders(src http.Header, reqID string) http.Header {
	h := src.Clone()
	if h == nil {
		h = http.Header{}
	}
	for _, c := range h.Values("Connection") {
		for _, f := range strings.Split(c, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	for _, k := range protocol.RoutingHeaders {
		h.Del(k)
	}
	h.Del("Content-Length")
	h.Del("Accept-Encoding")
	h.Set("Content-Type", "application/json")
	h.Set("X-Request-Id", reqID)
	return h
}

// postJSON sends one buffered leg.
func postJSON(ctx context.Context, client *http.Client, url string, hdr http.Header, body []byte) (http.Header, []byte, *legError) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, nil, &legError{class: classSetup, err: err}
	}
	req.Header = hdr
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, classifyTransport(ctx, err)
	}
	defer func() { _ = resp.Body.Close() }()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxLegResponse+1))
	if err != nil {
		return nil, nil, classifyTransport(ctx, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp.Header, b, &legError{class: classHTTP, status: resp.StatusCode, header: resp.Header, body: b}
	}
	if len(b) > maxLegResponse {
		return nil, nil, &legError{class: classBadResponse, err: fmt.Errorf("response exceeds %d bytes", maxLegResponse)}
	}
	return resp.Header, b, nil
}

func classifyTransport(ctx context.Context, err error) *legError {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return &legError{class: classTimeout, err: err}
	case ctx.Err() != nil:
		return &legError{class: classCanceled, err: err}
	}
	return &legError{class: classTransport, err: err}
}

// engineURL is the local decode engine's URL for path: base (--engine-url), with the port of
// x-pdgate-decoder-port when the EPP sent a valid one (port, from decoderPort; the host is
// always the configured one).
func engineURL(base *url.URL, port, path string, r *http.Request) string {
	u := *engineTarget(base, port)
	u.Path = strings.TrimSuffix(u.Path, "/") + path
	if r != nil {
		u.RawQuery = r.URL.RawQuery
	}
	return u.String()
}

// kvKeys are body fields that steer where an engine pulls KV from. A client must not set
// them (that would be an SSRF through the engine), so every body the sidecar forwards has
// them removed unless the sidecar itself sets them.
var kvKeys = []string{"kv_transfer_params", "disagg_prefill_resp", "bootstrap_host", "bootstrap_port",
	"bootstrap_room", "disaggregated_params"}

// sanitized returns a copy of the client's body without kvKeys.
func sanitized(obj *jsonbody.Object) *jsonbody.Object {
	c := obj.Clone()
	for _, k := range kvKeys {
		c.Delete(k)
	}
	return c
}

// localBody is the body for a decode with local prefill.
func localBody(rq *request) []byte {
	if rq.obj == nil {
		return rq.raw
	}
	return sanitized(rq.obj).Bytes()
}

// applyPrefillControls sets the fields every prefill leg carries: one output token, no
// streaming. keepCompletionTokens is false for TRT-LLM, which rejects max_completion_tokens.
func applyPrefillControls(o *jsonbody.Object, api API, keepCompletionTokens bool) {
	if api == APIResponses {
		o.SetInt("max_output_tokens", 1)
	} else {
		o.SetInt("max_tokens", 1)
		if keepCompletionTokens {
			o.SetInt("max_completion_tokens", 1)
		} else {
			o.Delete("max_completion_tokens")
		}
	}
	o.SetBool("stream", false)
	o.Delete("stream_options")
	o.Delete("min_tokens")
}

// controlKeys are the fields every dialect's prefill controls.
var controlKeys = []string{"stream", "stream_options", "max_tokens", "max_completion_tokens", "max_output_tokens", "min_tokens"}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// engineTarget is base with its port replaced by port ("" keeps base). Only the port
// changes: the host (IPv6 brackets re-added), scheme, path and user info stay.
func engineTarget(base *url.URL, port string) *url.URL {
	if port == "" {
		return base
	}
	u := *base
	u.Host = net.JoinHostPort(base.Hostname(), port)
	return &u
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
