package prefillrelease

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

type recorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *recorder) returned(id string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
}

func TestCheckAddress(t *testing.T) {
	for addr, want := range map[string]string{"10.0.0.9:9090": "10.0.0.9:9090", "[fd00::1]:9090": "[fd00::1]:9090",
		"epp.ns.svc:9090": "epp.ns.svc:9090", "fd00::1:9090": "[fd00::1]:9090", // "$(POD_IP):9090" on an IPv6 pod
		"": "", "10.0.0.9": "", ":9090": "", "10.0.0.9:0": "", "10.0.0.9:70000": "", "10.0.0.9:x": "", "a:b:9090": ""} {
		got, err := NormalizeAddress(addr)
		if got != want || (err == nil) != (want != "") || (CheckAddress(addr) == nil) != (want != "") {
			t.Errorf("%q: %q, %v; want %q", addr, got, err, want)
		}
	}
}

// A URL this process minted releases every releaser (204, idempotent at the handler: each
// call is passed on and the ledger ignores repeats); a forged or foreign signature is 403; a
// malformed call is 400/405; each is counted.
func TestCallback(t *testing.T) {
	cb, err := New("10.0.0.9:9090")
	if err != nil {
		t.Fatal(err)
	}
	returned := &recorder{} // the EPP core's PrefillReturned
	cb.OnReturned(returned.returned)
	other, _ := New("10.0.0.9:9090") // another replica (or a restarted process): another key
	id := "req/1 &x=y"
	good := cb.HeaderValue(id)
	u, err := url.Parse(good)
	if err != nil || u.Scheme != "http" || u.Host != "10.0.0.9:9090" || u.Path != protocol.PrefillReleasePath ||
		u.Query().Get("id") != id || len(u.Query().Get("sig")) != 64 {
		t.Fatalf("header value %q (%v)", good, err)
	}
	if cb.HeaderValue(id) != good || cb.HeaderValue("req-2") == good {
		t.Fatal("the value must be a function of the request id")
	}
	sig := u.Query().Get("sig")
	flipped := []byte(sig)
	flipped[0] ^= 1
	if flipped[0] > 'f' || (flipped[0] > '9' && flipped[0] < 'a') {
		flipped[0] = '0'
	}
	q := func(s string) string { return protocol.PrefillReleasePath + "?" + s }
	tests := []struct {
		name, method, target string
		code                 int
		result               string
	}{
		{"minted here", http.MethodPost, u.RequestURI(), 204, ResultOK},
		{"again: harmless", http.MethodPost, u.RequestURI(), 204, ResultOK},
		{"another replica's key", http.MethodPost, mustURI(t, other.HeaderValue(id)), 403, ResultBadSignature},
		{"signature of another id", http.MethodPost, q("id=req-2&sig=" + sig), 403, ResultBadSignature},
		{"flipped signature", http.MethodPost, q("id=" + url.QueryEscape(id) + "&sig=" + string(flipped)), 403, ResultBadSignature},
		{"no id", http.MethodPost, q("sig=" + sig), 400, ResultMalformed},
		{"empty id", http.MethodPost, q("id=&sig=" + sig), 400, ResultMalformed},
		{"two ids", http.MethodPost, q("id=a&id=b&sig=" + sig), 400, ResultMalformed},
		{"short sig", http.MethodPost, q("id=a&sig=abcd"), 400, ResultMalformed},
		{"sig not hex", http.MethodPost, q("id=a&sig=" + strings.Repeat("z", 64)), 400, ResultMalformed},
		{"bad query", http.MethodPost, q("id=%zz&sig=" + sig), 400, ResultMalformed},
		{"huge id", http.MethodPost, q("id=" + strings.Repeat("a", maxIDBytes+1) + "&sig=" + sig), 400, ResultMalformed},
		{"GET", http.MethodGet, u.RequestURI(), 405, ResultMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := testutil.ToFloat64(callbacks.WithLabelValues(tt.result))
			w := httptest.NewRecorder()
			cb.ServeHTTP(w, httptest.NewRequest(tt.method, tt.target, nil))
			if w.Code != tt.code {
				t.Fatalf("code %d, want %d: %s", w.Code, tt.code, w.Body.String())
			}
			if got := testutil.ToFloat64(callbacks.WithLabelValues(tt.result)) - before; got != 1 {
				t.Fatalf("%s counted %v times", tt.result, got)
			}
		})
	}
	if len(returned.ids) != 2 || returned.ids[0] != id || returned.ids[1] != id {
		t.Fatalf("reported %q, want %q twice", returned.ids, id)
	}
}

func mustURI(t *testing.T, s string) string {
	u, err := url.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return u.RequestURI()
}

func TestNothingInstalledIsHarmless(t *testing.T) {
	cb, err := New("127.0.0.1:9090")
	if err != nil {
		t.Fatal(err)
	}
	w := httptest.NewRecorder()
	cb.ServeHTTP(w, httptest.NewRequest(http.MethodPost, mustURI(t, cb.HeaderValue("x")), nil))
	if w.Code != 204 {
		t.Fatalf("code %d", w.Code)
	}
}
