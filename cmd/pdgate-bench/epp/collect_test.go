package epp

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"runtime"
	"strings"
	"testing"
)

// TestCollectGarbageRunsAFullCollection serves Go's heap profile handler in this process, as
// every EPP does on its metrics port, and checks that asking it through collectGarbage ran a
// collection that finished before the call returned.
func TestCollectGarbageRunsAFullCollection(t *testing.T) {
	srv := httptest.NewServer(pprof.Handler("heap"))
	defer srv.Close()
	addr := strings.TrimPrefix(srv.URL, "http://")
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	if err := collectGarbage(context.Background(), srv.Client(), addr); err != nil {
		t.Fatal(err)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	if after.NumForcedGC <= before.NumForcedGC {
		t.Fatalf("forced collections %d before, %d after: the request ran none", before.NumForcedGC, after.NumForcedGC)
	}
}

func TestCollectGarbageReportsAProcessWithoutTheHandler(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	err := collectGarbage(context.Background(), srv.Client(), strings.TrimPrefix(srv.URL, "http://"))
	if err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("err %v, want the 404 reported", err)
	}
}
