// Package prefillrelease is the EPP side of the prefill-release callback: with
// --prefill-release-address the request path gives every request that has a prefill target
// a signed URL (protocol.HeaderPrefillRelease); the sidecar POSTs to it when the prefill leg
// returns, and the EPP releases the prefill charge's active part in every configured
// contract.PrefillReleaser (pd-token-ledger) at once, instead of when the first response
// headers arrive (the end of generation for a non-streaming request).
//
// The URL names the request and carries an HMAC-SHA256 of its id under a random key made at
// start, per process: only this replica can mint a valid URL, so the handler needs no other
// authentication (it is served next to /metrics, outside the metrics endpoint's TokenReview
// filter), and a URL minted by another replica or a previous process is refused with 403.
package prefillrelease

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	crmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Results of pdgate_epp_prefill_release_callbacks_total.
const (
	ResultOK           = "ok"
	ResultBadSignature = "bad_signature"
	ResultMalformed    = "malformed"
)

// maxIDBytes bounds the request id a callback may name (the sidecar accepts ids up to 128).
const maxIDBytes = 1024

var callbacks = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "pdgate_epp_prefill_release_callbacks_total",
	Help: "Prefill-release callbacks from sidecars (--prefill-release-address), by result (ok, bad_signature, malformed).",
}, []string{"result"})

func init() {
	crmetrics.Registry.MustRegister(callbacks)
	for _, r := range []string{ResultOK, ResultBadSignature, ResultMalformed} {
		callbacks.WithLabelValues(r)
	}
}

// CheckAddress validates a --prefill-release-address value (see NormalizeAddress).
func CheckAddress(addr string) error {
	_, err := NormalizeAddress(addr)
	return err
}

// NormalizeAddress checks a --prefill-release-address value, host:port with a non-empty host
// and a port in 1..65535, and returns it as sidecars dial it. An unbracketed IPv6 literal
// followed by :port (what "$(POD_IP):9090" expands to on an IPv6 pod) is bracketed.
func NormalizeAddress(addr string) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		i := strings.LastIndexByte(addr, ':')
		if i < 0 || !strings.Contains(addr[:i], ":") || net.ParseIP(addr[:i]) == nil {
			return "", fmt.Errorf("--prefill-release-address %q: want host:port: %w", addr, err)
		}
		host, port = addr[:i], addr[i+1:]
	}
	if host == "" {
		return "", fmt.Errorf("--prefill-release-address %q: the host is empty (sidecars dial it; use the pod IP)", addr)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("--prefill-release-address %q: port must be in 1..65535", addr)
	}
	return net.JoinHostPort(host, port), nil
}

// Callback mints the callback URLs and serves them. The zero value is not usable; use New.
type Callback struct {
	prefix   string // http://addr/pdgate/v1/prefill-released?id=
	key      []byte
	returned atomic.Pointer[func(requestID string)]
}

// New builds the callback for the EPP reachable at addr (host:port, NormalizeAddress) with a
// fresh random key.
func New(addr string) (*Callback, error) {
	addr, err := NormalizeAddress(addr)
	if err != nil {
		return nil, err
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("prefill-release key: %w", err)
	}
	return &Callback{prefix: "http://" + addr + protocol.PrefillReleasePath + "?id=", key: key}, nil
}

// OnReturned installs what a returned prefill leg is reported to (the EPP core's
// PrefillReturned, once the config is loaded); until then a valid call is answered and
// changes nothing.
func (c *Callback) OnReturned(f func(requestID string)) {
	c.returned.Store(&f)
}

// HeaderValue is the value of protocol.HeaderPrefillRelease for the request.
func (c *Callback) HeaderValue(requestID string) string {
	return c.prefix + url.QueryEscape(requestID) + "&sig=" + hex.EncodeToString(c.sign(requestID))
}

func (c *Callback) sign(id string) []byte {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(id))
	return m.Sum(nil)
}

// ServeHTTP answers POST ?id=&sig=: 204 after releasing, 403 for a signature this process did
// not make, 400 (405 for another method) for anything malformed.
func (c *Callback) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		callbacks.WithLabelValues(ResultMalformed).Inc()
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST only", http.StatusMethodNotAllowed)
		return
	}
	q, err := url.ParseQuery(r.URL.RawQuery)
	ids, sigs := q["id"], q["sig"]
	if err != nil || len(ids) != 1 || len(sigs) != 1 || ids[0] == "" || len(ids[0]) > maxIDBytes {
		callbacks.WithLabelValues(ResultMalformed).Inc()
		http.Error(w, "want exactly one id and one sig", http.StatusBadRequest)
		return
	}
	sig, err := hex.DecodeString(sigs[0])
	if err != nil || len(sig) != sha256.Size {
		callbacks.WithLabelValues(ResultMalformed).Inc()
		http.Error(w, "sig: want 64 hex digits", http.StatusBadRequest)
		return
	}
	if !hmac.Equal(sig, c.sign(ids[0])) {
		callbacks.WithLabelValues(ResultBadSignature).Inc()
		http.Error(w, "bad signature", http.StatusForbidden)
		return
	}
	if f := c.returned.Load(); f != nil {
		(*f)(ids[0])
	}
	callbacks.WithLabelValues(ResultOK).Inc()
	w.WriteHeader(http.StatusNoContent)
}
