package proxy

import (
	"context"
	"encoding/hex"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Results of pdgate_sidecar_prefill_release_callbacks_total.
const (
	releaseOK         = "ok"
	releaseHTTPError  = "http_error"
	releaseTransport  = "transport_error"
	releaseInvalidURL = "invalid_url"
)

// DefaultPrefillReleaseTimeout bounds one prefill-release callback.
const DefaultPrefillReleaseTimeout = 500 * time.Millisecond

// prefillReleaseURL checks an x-pdgate-prefill-release value and returns the URL to call. The
// EPP overwrites the header on every request it routes, so a client cannot choose it through
// the gateway; the shape is still checked so that the header can never make the sidecar call
// anything but an EPP's callback: http only, no credentials, an explicit port, exactly
// protocol.PrefillReleasePath, exactly one id and one 64-hex-digit sig, nothing else.
func prefillReleaseURL(v string) (string, bool) {
	if v == "" || len(v) > 2048 {
		return "", false
	}
	u, err := url.Parse(v)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Opaque != "" || u.Fragment != "" || u.RawFragment != "" ||
		u.Hostname() == "" || u.Port() == "" || u.Path != protocol.PrefillReleasePath || (u.RawPath != "" && u.RawPath != u.Path) {
		return "", false
	}
	q, err := url.ParseQuery(u.RawQuery)
	if err != nil || len(q) != 2 || len(q["id"]) != 1 || len(q["sig"]) != 1 || q["id"][0] == "" {
		return "", false
	}
	if sig, err := hex.DecodeString(q["sig"][0]); err != nil || len(sig) != 32 {
		return "", false
	}
	out := url.URL{Scheme: "http", Host: u.Host, Path: protocol.PrefillReleasePath,
		RawQuery: url.Values{"id": q["id"], "sig": q["sig"]}.Encode()}
	return out.String(), true
}

// releaser makes the prefill-release callbacks to the EPP.
type releaser struct {
	// timeout bounds one callback; 0 disables them.
	timeout time.Duration
	client  *http.Client
	metrics *Metrics
}

// set records the request's callback from the routing header (invalid values are counted and
// dropped: the EPP releases at the response headers, as without it).
func (rl releaser) set(rq *request, v string) {
	if v == "" || rl.timeout <= 0 {
		return
	}
	u, ok := prefillReleaseURL(v)
	if !ok {
		rl.metrics.PrefillReleases.WithLabelValues(releaseInvalidURL).Inc()
		rq.log.Info("malformed prefill-release header ignored", "value", truncate(v, 256))
		return
	}
	rq.releaseURL = u
}

// returned tells the EPP, once per request and in the background, that the prefill leg
// returned (success or failure): its ledger releases the prefill pod's active-token charge now
// instead of when the response headers reach it. It never blocks or fails the request.
func (rl releaser) returned(rq *request) {
	if rq.releaseURL == "" {
		return
	}
	rq.releaseOnce.Do(func() {
		u := rq.releaseURL
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), rl.timeout)
			defer cancel()
			result := rl.post(ctx, u)
			rl.metrics.PrefillReleases.WithLabelValues(result).Inc()
			if result != releaseOK {
				rq.log.V(1).Info("prefill-release callback failed; the EPP releases at the response headers", "result", result)
			}
		}()
	})
}

func (rl releaser) post(ctx context.Context, u string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, http.NoBody)
	if err != nil {
		return releaseInvalidURL
	}
	resp, err := rl.client.Do(req)
	if err != nil {
		return releaseTransport
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	_ = resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return releaseHTTPError
	}
	return releaseOK
}
