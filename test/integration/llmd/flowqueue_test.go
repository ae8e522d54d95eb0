package llmd

import (
	"context"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/epp/extproc"
	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// TestFlowQueueDurationHeader: llm-d v0.11's x-llm-d-flow-queue-duration-ms through the real
// EPP. A request flow control admitted gets it on its response headers, whole milliseconds; the
// same pool without flow control never sets it, and neither does an answer to a request flow
// control refused (TestInferenceTTLHeader's 429, checked here too).
func TestFlowQueueDurationHeader(t *testing.T) {
	for _, tc := range []struct {
		config string
		want   bool
	}{
		{config: "testdata/v011flowqueue/flowcontrol.yaml", want: true},
		{config: "testdata/v011flowqueue/legacy.yaml", want: false},
	} {
		t.Run(tc.config, func(t *testing.T) {
			e := inprocepp.Start(t, tc.config, []inprocepp.Pod{{Name: "only", IP: "127.0.38.1", Metrics: inprocepp.IdleVLLM}},
				inprocepp.Options{PoolName: "v011-flow-queue"})
			e.WaitScraped(t, map[string]int{"only": 0})
			rt, st, done, err := eppclient.Open(extprocclient.New(extprocclient.Options{}, e.Client), "/v1/completions", nil,
				[]byte(completionBody("flow queue")), 30*time.Second)
			defer done()
			if err != nil {
				t.Fatal(err)
			}
			if rt.Status() != 0 {
				t.Fatalf("answered %d, want the request routed", rt.Status())
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			reply, err := st.ResponseHeaders(ctx, extprocclient.HeaderMap(map[string]string{":status": "200", "content-type": "application/json"}), "", false)
			if err != nil {
				t.Fatal(err)
			}
			got, has := "", false
			for _, o := range reply.Mutation.GetSetHeaders() {
				if strings.EqualFold(o.GetHeader().GetKey(), extproc.HeaderFlowQueueDuration) {
					got, has = extprocclient.HeaderValue(o.GetHeader()), true
				}
			}
			if has != tc.want {
				t.Fatalf("%s set %v (%q), want %v", extproc.HeaderFlowQueueDuration, has, got, tc.want)
			}
			if ms, err := strconv.Atoi(got); has && (err != nil || ms < 0 || ms > 30000) {
				t.Fatalf("%s = %q, want whole milliseconds", extproc.HeaderFlowQueueDuration, got)
			}
		})
	}
	t.Run("refused by flow control", func(t *testing.T) {
		down := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { http.Error(w, "down", http.StatusInternalServerError) })
		e := inprocepp.Start(t, "testdata/v011ttl/flowcontrol-ttl.yaml",
			[]inprocepp.Pod{{Name: "only", IP: "127.0.38.2", Metrics: down}}, inprocepp.Options{PoolName: "v011-flow-queue-refused"})
		a, done, err := e.Open("/v1/completions", map[string]string{"x-llm-d-inference-ttl": "200ms"}, completionBody("refused"), 30*time.Second)
		done()
		if err != nil {
			t.Fatal(err)
		}
		if a.Immediate != http.StatusTooManyRequests {
			t.Fatalf("answer %d, want 429", a.Immediate)
		}
		if v, ok := a.ImmediateHeaders[extproc.HeaderFlowQueueDuration]; ok {
			t.Fatalf("a refused request carries %s: %q", extproc.HeaderFlowQueueDuration, v)
		}
	})
}
