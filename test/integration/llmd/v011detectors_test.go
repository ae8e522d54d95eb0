package llmd

import (
	"context"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/cmd/pdgate/cli"
	"github.com/pdgate/pdgate/test/inprocepp"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// startWithSheddable starts configPath over pods with an InferenceObjective "batch" of
// priority −1, the class GIE's legacy admission sheds when the detector reads >= 1.
func startWithSheddable(t *testing.T, configPath, pool string, pods []inprocepp.Pod) *inprocepp.EPP {
	t.Helper()
	e := inprocepp.Start(t, configPath, pods, inprocepp.Options{PoolName: pool})
	e.SetObjective("batch", -1)
	return e
}

// sendSheddable sends one sheddable request and reports whether it was shed with 429 and
// llm-d's rejected-saturated reason (any other early answer fails the test).
func sendSheddable(t *testing.T, e *inprocepp.EPP) bool {
	t.Helper()
	a, done, err := e.Open("/v1/completions", map[string]string{metadata.ObjectiveKey: "batch"}, completionBody("sheddable"), 10*time.Second)
	done()
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case a.Immediate == 0:
		return false
	case a.Immediate == http.StatusTooManyRequests && a.ImmediateHeaders["x-llm-d-request-dropped-reason"] == "rejected-saturated":
		return true
	}
	t.Fatalf("sheddable request: %d %v %q", a.Immediate, a.ImmediateHeaders, a.Body)
	return false
}

// utilization-detector's stalenessPolicy through the real EPP: the only pod's metrics endpoint
// fails, so its metrics are never fresh. Fail-closed (the default, saturated) reads 1.0 and
// sheds; ignore leaves the stale pod out, reads 0.0 and dispatches. Any other policy is a load
// error naming the plugin and the field.
func TestUtilizationDetectorStalenessPolicy(t *testing.T) {
	down := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "engine down", http.StatusInternalServerError)
	})
	for i, tc := range []struct {
		policy string
		shed   bool
	}{{"saturated", true}, {"ignore", false}} {
		t.Run(tc.policy, func(t *testing.T) {
			ip := []string{"127.0.36.1", "127.0.36.2"}[i]
			e := startWithSheddable(t, "testdata/v011detectors/utilization-"+tc.policy+".yaml", "v011-util-"+tc.policy,
				[]inprocepp.Pod{{Name: "only", IP: ip, Metrics: down}})
			if got := sendSheddable(t, e); got != tc.shed {
				t.Fatalf("stalenessPolicy %s: shed %v, want %v", tc.policy, got, tc.shed)
			}
		})
	}
	t.Run("invalid policy", func(t *testing.T) {
		doc := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: utilization-detector\n  name: util\n  parameters:\n    stalenessPolicy: open\n- type: queue-scorer\nflowControl:\n  saturationDetector:\n    pluginRef: util\n"
		_, err := cli.Validate(context.Background(), []byte(doc))
		if err == nil || !strings.Contains(err.Error(), `utilization-detector "util"`) || !strings.Contains(err.Error(), "stalenessPolicy") {
			t.Fatalf("want a load error naming the plugin and stalenessPolicy, got %v", err)
		}
	})
}

// max-saturation-detector through the real EPP: prefill pods wait 3, decode pods 0. Scoped to
// prefill, the strict child (threshold 2) reads 1.5 there and the sheddable request is shed;
// scoped to decode, prefill runs only the lenient child (0.3) and it is served. Its children are
// declared after it, and a child that is not a saturation detector is a startup error.
func TestMaxSaturationDetectorStages(t *testing.T) {
	shedWhenStrictOn := map[string]bool{"prefill": true, "decode": false}
	for i, stage := range []string{"prefill", "decode"} {
		tc := struct {
			stage string
			shed  bool
		}{stage, shedWhenStrictOn[stage]}
		t.Run(tc.stage, func(t *testing.T) {
			base := 10 + 4*i
			ip := func(n int) string { return "127.0.36." + strconv.Itoa(base+n) }
			pods := []inprocepp.Pod{
				{Name: "prefill-0", IP: ip(0), Labels: map[string]string{role: "prefill"}, Metrics: testsupport.VLLMMetrics(3, 1)},
				{Name: "prefill-1", IP: ip(1), Labels: map[string]string{role: "prefill"}, Metrics: testsupport.VLLMMetrics(3, 1)},
				{Name: "decode-0", IP: ip(2), Labels: map[string]string{role: "decode"}, Metrics: testsupport.VLLMMetrics(0, 1)},
				{Name: "decode-1", IP: ip(3), Labels: map[string]string{role: "decode"}, Metrics: testsupport.VLLMMetrics(0, 1)},
			}
			e := startWithSheddable(t, "testdata/v011detectors/max-saturation-"+tc.stage+".yaml", "v011-max-"+tc.stage, pods)
			e.WaitScraped(t, map[string]int{"prefill-0": 3, "prefill-1": 3, "decode-0": 0, "decode-1": 0})
			if got := sendSheddable(t, e); got != tc.shed {
				t.Fatalf("strict child scoped to %s: shed %v, want %v", tc.stage, got, tc.shed)
			}
			served := (&epp{EPP: e}).send(t, "/v1/completions", nil, completionBody("not sheddable"))
			if served.immediate != 0 || !strings.HasPrefix(served.destination, ip(2)+":") && !strings.HasPrefix(served.destination, ip(3)+":") {
				t.Fatalf("non-sheddable request: %v, want routed to a decode pod", served)
			}
		})
	}
	t.Run("child not a detector", func(t *testing.T) {
		doc := "apiVersion: llm-d.ai/v1alpha1\nkind: EndpointPickerConfig\nplugins:\n- type: max-saturation-detector\n  name: combined\n  parameters:\n    detectors: [queue-scorer]\n- type: queue-scorer\nflowControl:\n  saturationDetector:\n    pluginRef: combined\n"
		_, err := cli.Validate(context.Background(), []byte(doc))
		if err == nil || !strings.Contains(err.Error(), `max-saturation-detector "combined": detectors[0]: plugin "queue-scorer" (type queue-scorer) is not a saturation detector`) {
			t.Fatalf("want a startup error naming the child, got %v", err)
		}
	})
}

// serveStreamed runs one request through a real ext_proc stream and answers it as a streaming
// engine would: the first chunk after ttft[destination IP], then the end of the stream. It
// returns the destination's IP.
func serveStreamed(t *testing.T, e *inprocepp.EPP, ttft map[string]time.Duration) string {
	t.Helper()
	rt, st, done, err := eppclient.Open(extprocclient.New(extprocclient.Options{}, e.Client), "/v1/completions", nil,
		[]byte(completionBody("how fast is the first token")), 10*time.Second)
	defer done()
	if err != nil {
		t.Fatal(err)
	}
	dests := rt.Destinations()
	if len(dests) == 0 {
		t.Fatalf("not routed: status %d", rt.Status())
	}
	host, _, _ := net.SplitHostPort(dests[0])
	time.Sleep(ttft[host])
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	headers := extprocclient.HeaderMap(map[string]string{":status": "200", "content-type": "text/event-stream"})
	if _, err := st.ResponseHeaders(ctx, headers, dests[0], false); err != nil {
		t.Fatal(err)
	}
	if err := st.RelayResponseBody(ctx, strings.NewReader("data: {\"choices\":[{\"text\":\"hi\"}]}\n\ndata: [DONE]\n\n"), func([]byte) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return host
}

// The latency-observation pair through the real EPP, in pdgate's form (no dataLayer entry: the
// producer ticks by itself) and llm-d's (the producer listed under dataLayer.sources). Two idle
// pods, one answering its first token at once, the other after 80 ms. While both are cold they
// share the traffic; once both have minRequests (3) observations the scorer predicts their TTFT
// at their live in-flight count (0 here, so the floor) and every request goes to the fast pod.
func TestLatencyObservationPair(t *testing.T) {
	for i, config := range []string{"latency-observation.yaml", "latency-observation-sources.yaml"} {
		t.Run(config, func(t *testing.T) {
			fast, slow := "127.0.36."+strconv.Itoa(30+2*i), "127.0.36."+strconv.Itoa(31+2*i)
			e := inprocepp.Start(t, "testdata/v011detectors/"+config, []inprocepp.Pod{
				{Name: "fast", IP: fast, Metrics: inprocepp.IdleVLLM},
				{Name: "slow", IP: slow, Metrics: inprocepp.IdleVLLM},
			}, inprocepp.Options{PoolName: "v011-ttft-" + strconv.Itoa(i)})
			ttft := map[string]time.Duration{slow: 80 * time.Millisecond}
			seen := map[string]int{}
			for n := 0; n < 80 && (seen[fast] < 3 || seen[slow] < 3); n++ {
				seen[serveStreamed(t, e, ttft)]++
			}
			if seen[fast] < 3 || seen[slow] < 3 {
				t.Fatalf("warm-up never observed both pods three times: %v", seen)
			}
			time.Sleep(100 * time.Millisecond) // a few ticks: both snapshots published
			for n := 0; n < 8; n++ {
				if got := serveStreamed(t, e, ttft); got != fast {
					t.Fatalf("request %d after calibration went to %s, want the fast pod %s (warm-up %v)", n, got, fast, seen)
				}
			}
		})
	}
}
