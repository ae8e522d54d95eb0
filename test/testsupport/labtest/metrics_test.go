package labtest

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

func TestMetrics(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.Error(w, "pdgate_fake_total 99", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("# TYPE pdgate_fake_total counter\npdgate_fake_total{pod=\"a\"} 2\npdgate_fake_total{pod=\"b\"} 3\n"))
	}))
	defer srv.Close()
	m, err := Metrics(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if got := m["pdgate_fake_total"]; got != 5 {
		t.Errorf("pdgate_fake_total = %v, want the two samples' sum 5", got)
	}
	// an error page is an error, even when its text would parse as a sample
	if m, err := Metrics(srv.URL + "/other"); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("a 503 page: %v, %v; want an error naming the status", m, err)
	}
}
