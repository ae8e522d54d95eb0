package runner

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/epp/prefillrelease"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

func TestPrefillReleaseAddressFlag(t *testing.T) {
	for _, tt := range []struct {
		arg, wantErr string
	}{
		{"", ""},
		{"--prefill-release-address=10.0.0.9:9090", ""},
		{"--prefill-release-address=10.0.0.9", "--prefill-release-address"},
		{"--prefill-release-address=:9090", "the host is empty"},
	} {
		args := []string{"--endpoints-file=x.yaml"}
		if tt.arg != "" {
			args = append(args, tt.arg)
		}
		_, err := ParseArgs(args)
		if (tt.wantErr == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.wantErr)) {
			t.Errorf("%q: Validate = %v, want %q", tt.arg, err, tt.wantErr)
		}
	}
}

// The callback is served next to /metrics (standalone) and, in Kubernetes mode, bypasses the
// metrics endpoint's authentication filter, which keeps guarding every other path.
func TestPrefillReleaseServedOnTheMetricsServer(t *testing.T) {
	cb, err := prefillrelease.New("127.0.0.1:9090")
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(cb.HeaderValue("r1"))
	post := func(h http.Handler, target string) int {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, target, nil))
		return w.Code
	}
	if code := post(metricsHandler(false, cb), u.RequestURI()); code != http.StatusNoContent {
		t.Fatalf("standalone: %d", code)
	}
	if code := post(metricsHandler(false, nil), u.RequestURI()); code != http.StatusNotFound {
		t.Fatalf("disabled: %d", code)
	}
	deny := func(_ logr.Logger, _ http.Handler) (http.Handler, error) {
		return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusUnauthorized) }), nil
	}
	filter := exceptPrefillRelease(deny)
	callback, err := filter(logr.Discard(), cb)
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := filter(logr.Discard(), http.NotFoundHandler())
	if code := post(callback, u.RequestURI()); code != http.StatusNoContent {
		t.Fatalf("callback behind the auth filter: %d", code)
	}
	if code := post(metrics, "/metrics"); code != http.StatusUnauthorized {
		t.Fatalf("/metrics must stay authenticated: %d", code)
	}
	if code := post(metrics, protocol.PrefillReleasePath+"x"); code != http.StatusUnauthorized {
		t.Fatalf("only the exact path bypasses: %d", code)
	}
}
