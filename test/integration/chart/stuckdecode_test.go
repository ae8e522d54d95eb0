package chart

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/inprocepp"
)

// TestDefaultConfigAvoidsDecodePodWithStuckRequests: the chart's default EPP config
// (pd-plugins.yaml), run in GIE's real scheduler and director, stops sending new requests to a
// decode pod once many of its requests are stuck in flight, although its engine metrics look
// idle and the prefix cache pins the (identical) prompt to it. The EPP's own in-flight count
// (PreRequest to end of stream) is what moves the pick.
func TestDefaultConfigAvoidsDecodePodWithStuckRequests(t *testing.T) {
	vals := values(t, nil, "inferencePool.modelServers.matchLabels.app=x")
	text := field(t, find(t, mustRender(t, "demo", testNS, vals), "ConfigMap", "demo-epp"), "data", "pd-plugins.yaml").(string)
	path := filepath.Join(t.TempDir(), "pd-plugins.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	role := "llm-d.ai/role"
	pods := []inprocepp.Pod{
		{Name: "prefill-0", IP: "127.0.0.61", Labels: map[string]string{role: "prefill"}, Metrics: inprocepp.IdleVLLM},
		{Name: "decode-0", IP: "127.0.0.62", Labels: map[string]string{role: "decode"}, Metrics: inprocepp.IdleVLLM},
		{Name: "decode-1", IP: "127.0.0.63", Labels: map[string]string{role: "decode"}, Metrics: inprocepp.IdleVLLM},
	}
	e := inprocepp.Start(t, path, pods, inprocepp.Options{PoolName: "demo-pool"})
	body := fmt.Sprintf(`{"model":"m","max_tokens":64,"prompt":%q}`, strings.Repeat("the same long shared system prompt, ", 200))

	// The pods' engine metrics stay idle (inprocepp.IdleVLLM), as a hung engine's do. Every
	// request stays in flight (stuck) until the test ends.
	picks := map[string]int{}
	var first string
	for i := 0; i < 100; i++ {
		a, done, err := e.Open("/v1/completions", nil, body, 2*time.Minute)
		t.Cleanup(done)
		if err != nil || a.Immediate != 0 {
			t.Fatalf("request %d: %v %+v", i, err, a)
		}
		dest := a.Set["x-gateway-destination-endpoint"]
		picks[dest]++
		if first == "" {
			first = dest
			// GIE's approximate-prefix producer adds a request's blocks to its index in a
			// goroutine after PreRequest, so a request sent at once after the first one can
			// be scored before the pin exists (CI saw exactly that: request 1 went to the
			// other decode pod on in-flight load alone). Real traffic is spread in time; give
			// the index that time once, then send the rest back to back.
			time.Sleep(500 * time.Millisecond)
		}
		if dest != first {
			t.Logf("request %d left %s after %d stuck requests there; picks %v", i, first, picks[first], picks)
			if picks[first] < 2 {
				t.Fatalf("the prefix cache should pin the prompt to %s for a while first; picks %v", first, picks)
			}
			return
		}
	}
	t.Fatalf("every one of %d requests went to %s while they were all stuck there: %v", picks[first], first, picks)
}
