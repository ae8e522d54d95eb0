package llmd

import (
	"net/http"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/inprocepp"
)

// TestInferenceTTLHeader: llm-d v0.11's x-llm-d-inference-ttl through the real EPP's flow
// control. The pool reads saturated for good, so a queued request leaves only when its queue TTL
// ends: with the header that is the client's 300 ms, the minimum of it and the configured 60 s,
// and the answer is llm-d's 429 rejected-ttl-expired. A header that is not a positive Go
// duration is ignored, so that request is still queued 3 s later.
func TestInferenceTTLHeader(t *testing.T) {
	down := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "engine down", http.StatusInternalServerError)
	})
	e := inprocepp.Start(t, "testdata/v011ttl/flowcontrol-ttl.yaml",
		[]inprocepp.Pod{{Name: "only", IP: "127.0.37.1", Metrics: down}}, inprocepp.Options{PoolName: "v011-ttl"})

	t.Run("the client's TTL ends the wait", func(t *testing.T) {
		a, done, err := e.Open("/v1/completions", map[string]string{"x-llm-d-inference-ttl": "300ms"}, completionBody("ttl"), 30*time.Second)
		done()
		if err != nil {
			t.Fatalf("no answer within 30 s (the header was not applied; the configured TTL is 60 s): %v", err)
		}
		if a.Immediate != http.StatusTooManyRequests || a.ImmediateHeaders["x-llm-d-request-dropped-reason"] != "rejected-ttl-expired" {
			t.Fatalf("answer %d %v %q, want 429 rejected-ttl-expired", a.Immediate, a.ImmediateHeaders, a.Body)
		}
	})
	for _, v := range []string{"soon", "-1s", "0s"} {
		t.Run("ignored: "+v, func(t *testing.T) {
			// The stream's own deadline stays well past the 3 s watched: gRPC hands a client's
			// deadline to the server, whose queue would then end the wait at the same instant
			// as the client gives up, and the two race.
			type answer struct {
				a   inprocepp.Answer
				err error
			}
			got := make(chan answer, 1)
			go func() {
				a, done, err := e.Open("/v1/completions", map[string]string{"x-llm-d-inference-ttl": v}, completionBody("ttl"), 30*time.Second)
				done()
				got <- answer{a, err}
			}()
			select {
			case r := <-got:
				if r.err == nil {
					t.Fatalf("answered %d %v with an unusable TTL %q; want the request still queued", r.a.Immediate, r.a.ImmediateHeaders, v)
				}
				t.Fatalf("the exchange failed before 3 s: %v", r.err)
			case <-time.After(3 * time.Second):
			}
		})
	}
}
