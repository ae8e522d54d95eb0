package faults

import (
	"context"
	"net/http"
	"strings"
	"testing"
	"time"
)

// Each case: a bounded load (workers, request cap, run time) through the gateway while one
// fault happens, then the invariants. Outcomes name the status and the error header (or the
// OpenAI error type) the client saw; the allowed ones are the documented answers to the fault
// (docs/reliability.md).

const (
	workers     = 4
	maxRequests = 80
	runFor      = 6 * time.Second
)

// mixed alternates streaming and non-streaming chats.
func mixed(i int) request { return request{stream: i%2 == 0, maxTokens: 8} }

// during runs the load for runFor, paced so its requests cover the whole window, and calls
// fault after faultAt.
func during(c *cluster, faultAt time.Duration, fault func(), mk func(int) request) report {
	stop := make(chan struct{})
	go func() {
		time.Sleep(faultAt)
		fault()
		time.Sleep(runFor - faultAt)
		close(stop)
	}()
	return loadPaced(c.URL(), workers, maxRequests, runFor*workers/maxRequests, stop, mk)
}

func hit(t *testing.T, rep report, outcomes ...string) {
	t.Helper()
	for _, o := range outcomes {
		if rep.outcomes[o] > 0 {
			return
		}
	}
	t.Errorf("the fault never showed: no outcome among %v (%s)", outcomes, rep)
}

// A prefill pod killed mid-run: the sidecar falls back to a local prefill (the default
// policy), so clients only see 200s.
func TestPrefillPodKilled(t *testing.T) {
	c := startCluster(t, pdTopology(t, ""), "127.0.81", nil)
	base := c.baseline(t)
	rep := during(c, time.Second, func() {
		c.kill("sim-prefill-a-0")
		c.kill("sim-prefill-b-0")
	}, mixed)
	checkOutcomes(t, rep)
	c.checkSettled(t, base)
}

// Prefill 5xx bursts under the fail-fast policy: the prefiller's status with
// x-error-pd-prefill, never a hang or an unexplained error.
func TestPrefill5xxBurst(t *testing.T) {
	extra := map[string][]string{"sim-prefill-a-0": {"--fault-5xx-rate", "0.5"}, "sim-prefill-b-0": {"--fault-5xx-rate", "0.5"}}
	c := startCluster(t, pdTopology(t, `"--prefill-failure-policy=fail-fast"`), "127.0.82", extra)
	base := c.baseline(t)
	rep := load(c.URL(), workers, 40, nil, mixed)
	checkOutcomes(t, rep, "500/x-error-pd-prefill")
	hit(t, rep, "500/x-error-pd-prefill")
	c.checkSettled(t, base)
}

// watchdogArgs are short decode watchdog timeouts for the decode fault cases.
const watchdogArgs = `"--decode-first-response-timeout=1s", "--decode-stream-idle-timeout=1s", "--decode-response-timeout=3s"`

// A decode engine that answers 200 and then never sends its first token: every request gets
// 504 with x-error-pd-decode from the first-response watchdog (streams: headers alone do not
// count as a response) or the response watchdog (non-streaming), never a cut stream.
func TestDecodeNeverSendsFirstToken(t *testing.T) {
	hang := []string{"--fault-hang-first-token-rate", "1"}
	extra := map[string][]string{"sim-decode-a-0": hang, "sim-decode-b-0": hang}
	c := startCluster(t, pdTopology(t, watchdogArgs), "127.0.83", extra)
	base := c.baseline(t)
	rep := load(c.URL(), workers, 40, nil, mixed)
	checkOutcomes(t, rep, "504/x-error-pd-decode")
	hit(t, rep, "504/x-error-pd-decode")
	c.checkSettled(t, base)
}

// A decode engine that stalls mid-stream: the idle watchdog cuts the stream (no [DONE]);
// a non-streaming request gets 504 from the response watchdog.
func TestDecodeStallsMidStream(t *testing.T) {
	stall := []string{"--fault-stall-after", "3"}
	extra := map[string][]string{"sim-decode-a-0": stall, "sim-decode-b-0": stall}
	c := startCluster(t, pdTopology(t, watchdogArgs), "127.0.84", extra)
	base := c.baseline(t)
	rep := load(c.URL(), workers, 40, nil, func(i int) request { return request{stream: i%2 == 0, maxTokens: 12} })
	checkOutcomes(t, rep, "504/x-error-pd-decode", "cut")
	hit(t, rep, "cut")
	c.checkSettled(t, base)
}

// A simulator dropping connections: the sidecar answers 502 (upstream error) for a decode
// connection closed before any answer; a mid-stream drop cuts the stream.
func TestSimulatorDropsConnections(t *testing.T) {
	extra := map[string][]string{"sim-decode-a-0": {"--fault-drop-rate", "0.5"}, "sim-decode-b-0": {"--fault-drop-rate", "0.5"}}
	c := startCluster(t, pdTopology(t, ""), "127.0.85", extra)
	base := c.baseline(t)
	rep := load(c.URL(), workers, 40, nil, mixed)
	checkOutcomes(t, rep, "502/x-error-pd-decode", "502/upstream_error", "cut")
	c.checkSettled(t, base)
}

// Every encoder failing: E/P/D requests get 502 with x-error-pd-encode from the sidecar's
// encode fan-out (and an OpenAI error body); text-only requests are unaffected.
func TestEncoderFailing(t *testing.T) {
	topo := topology(t, `name: faults-epd
eppConfig: ../llmd/e-p-d.yaml
simProfile: ../sim/llama3-8b-h100.yaml
timeScale: 5
pods:
- {name: encode, role: encode, engine: vllm, count: 2, kvConnector: shared-storage, simArgs: ["--fault-5xx-rate=1"]}
- {name: prefill, role: prefill, roleset: rs-a, engine: vllm, kvConnector: shared-storage}
- {name: decode, role: decode, roleset: rs-a, engine: vllm, count: 2, kvConnector: shared-storage}
`)
	c := startCluster(t, topo, "127.0.86", nil)
	base := c.baseline(t)
	rep := load(c.URL(), workers, 24, nil, func(i int) request {
		if i%2 == 0 {
			return request{image: "https://example.invalid/cat-" + string(rune('a'+i%26)) + ".png"}
		}
		return request{}
	})
	checkOutcomes(t, rep, "502/x-error-pd-encode")
	hit(t, rep, "502/x-error-pd-encode")
	if rep.outcomes["200"] == 0 {
		t.Errorf("text-only requests must still succeed: %s", rep)
	}
	c.checkSettled(t, base)
}

// A pod removed from the endpoints file while requests run on it: they finish (200), and the
// EPP stops picking it once it reloaded the file.
func TestEndpointRemovedInFlight(t *testing.T) {
	c := startCluster(t, pdTopology(t, ""), "127.0.87", nil)
	base := c.baseline(t)
	served := c.endpointsServed(t)
	rep := during(c, 1500*time.Millisecond, func() { c.removeEndpoint("decode-a-0") },
		func(i int) request { return request{stream: i%2 == 0, maxTokens: 48} })
	checkOutcomes(t, rep)
	c.waitEndpoints(t, served-1)
	for i := 0; i < 12; i++ {
		res := send(context.Background(), c.URL(), request{header: http.Header{"X-Pdgate-Trace": {"1"}}})
		d := res.Header.Get("x-pdgate-decision")
		if res.Status != http.StatusOK || d == "" {
			t.Fatalf("after removal: %s, decision %q", outcome(res), d)
		}
		if strings.Contains(d, "decode-a-0") {
			t.Fatalf("removed pod still picked: %s", d)
		}
	}
	c.checkSettled(t, base)
}

// The EPP restarted under load: the gateway (fail-closed) answers 503
// endpoint_picker_unavailable while it is down, and every request succeeds again after. A
// stream whose response was passing through the EPP at the kill is cut (the gateway processes
// response bodies through ext_proc); only those, at most one per worker, may end "cut". The
// paced load has requests in flight at the kill on any machine, so this case is exercised.
func TestEPPRestartedUnderLoad(t *testing.T) {
	c := startCluster(t, pdTopology(t, ""), "127.0.88", nil)
	base := c.baseline(t)
	delete(base, "epp") // a new process
	rep := during(c, time.Second, func() {
		c.kill("epp")
		time.Sleep(1500 * time.Millisecond)
		c.start("epp")
	}, mixed)
	checkOutcomes(t, rep, "503/endpoint_picker_unavailable", "503/no_endpoint", "cut")
	hit(t, rep, "503/endpoint_picker_unavailable")
	if n := rep.outcomes["cut"]; n > workers {
		t.Errorf("%d streams cut; only the %d in flight at the kill may be", n, workers)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c.waitHealthy(ctx, "epp")
	c.warmUp(ctx)
	after := load(c.URL(), workers, 20, nil, mixed)
	if after.outcomes["200"] != int(after.sent) {
		t.Errorf("after the restart every request must succeed: %s", after)
	}
	c.checkSettled(t, base)
}
