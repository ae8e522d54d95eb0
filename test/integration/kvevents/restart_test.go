package kvevents

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// Central mode as publishers we did not write behave: the topic names the pod IP alone, the
// sequence starts at 0 or 1 per process, nothing is announced at start, and engines restart.
const restartConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: metrics-data-source
- type: core-metrics-extractor
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig: {blockSize: 16}
    kvEventsConfig: {zmqEndpoint: "tcp://127.0.0.1:%d"}
` + centralDecider + `dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: precise-prefix-cache-scorer
    weight: 10
  - pluginRef: max-score-picker
`

// warm caches a fresh prompt on holder until the EPP routes it there as cached (the 412 gate
// forwards it), and returns the prompt.
func warm(t *testing.T, _ any, holder, seed string, route func(string, bool) decision) string {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for try := 0; ; try++ {
		p := prompt(fmt.Sprintf("%s try %d", seed, try), 160)
		complete(t, holder, p)
		time.Sleep(300 * time.Millisecond)
		if g := route(p, true); g.status == 0 && g.dest == holder {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("a prompt cached on %s is never routed to it as cached", holder)
		}
	}
}

// An engine that dies and comes back (same address, empty cache, sequence from its first value
// again) must not keep attracting requests on what the dead process cached: its blocks are
// dropped once its metrics stop being scraped, before it publishes anything new, and its new
// stream is indexed from scratch.
func TestCentralModeRestartedEnginesNeverScoreDeadBlocks(t *testing.T) {
	httpPort, zmqPort := testsupport.FreePort(t), testsupport.FreePort(t)
	engine := func(host string, seqStart int, format string) *testsupport.Proc {
		return startProc(t, "sim", "--host", host, "--port", strconv.Itoa(httpPort), "--role", "combined", "--model", "m",
			"--kv-events-endpoint", "tcp://127.0.0.1:"+strconv.Itoa(zmqPort), "--kv-events-topic", "kv@"+host+"@m",
			"--kv-events-seq-start", strconv.Itoa(seqStart), "--kv-events-format", format, "--kv-events-no-start-clear")
	}
	a := engine("127.0.0.2", 1, "array") // a publisher counting from 1, SGLang's array events
	engine("127.0.0.3", 0, "map")        // vLLM's: from 0, map events
	addrA, addrB := "127.0.0.2:"+strconv.Itoa(httpPort), "127.0.0.3:"+strconv.Itoa(httpPort)
	waitHTTP(t, "http://"+addrA+"/health")
	waitHTTP(t, "http://"+addrB+"/health")
	epp, metricsURL := startEPP(t, fmt.Sprintf(`endpoints:
- {name: decode-a, address: 127.0.0.2, port: %d, labels: {llm-d.ai/role: decode}}
- {name: decode-b, address: 127.0.0.3, port: %d, labels: {llm-d.ai/role: decode}}
`, httpPort, httpPort), fmt.Sprintf(restartConfig, zmqPort))
	routeFn := func(p string, conditional bool) decision { return route(t, epp, p, conditional) }

	for restart := 0; restart < 2; restart++ {
		cached := warm(t, epp, addrA, fmt.Sprintf("restart %d", restart), routeFn)
		warm(t, epp, addrB, fmt.Sprintf("other engine %d", restart), routeFn)
		unreachable := testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_resyncs_total{reason="engine_unreachable"}`)

		// Down long enough for any real restart (weights load for tens of seconds); the EPP
		// notices from the metrics it can no longer scrape.
		a.Kill()
		deadline := time.Now().Add(15 * time.Second)
		for testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_resyncs_total{reason="engine_unreachable"}`) <= unreachable {
			if time.Now().After(deadline) {
				t.Fatal("the dead engine's blocks were never dropped")
			}
			time.Sleep(100 * time.Millisecond)
		}
		a.Start()
		waitHTTP(t, "http://"+addrA+"/health")
		// The restarted process holds nothing: the prompt the dead one cached is cached
		// nowhere, so Prefer: if-available must be refused, never sent to A as cached.
		for i := 0; i < 5; i++ {
			if d := route(t, epp, cached, true); d.status != 412 {
				t.Fatalf("restart %d: a prompt only the dead process cached is answered %+v, want 412", restart, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// The restarted engines' new streams (seq from their first value again) are indexed.
	warm(t, epp, addrA, "after the restarts", routeFn)
	if n := testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_messages_total{result="unmatched_source"}`); n != 0 {
		t.Fatalf("%v messages unmatched: port-less topics must map to the endpoint at the address", n)
	}
}

// Two engines on one IP (different ports) that name only the IP in their topics: pdgate cannot
// tell their streams apart, so it refuses both, says so in a metric, and never merges them.
func TestCentralModeRefusesAmbiguousPortlessTopics(t *testing.T) {
	portA, portB, zmqPort := testsupport.FreePort(t), testsupport.FreePort(t), testsupport.FreePort(t)
	for _, port := range []int{portA, portB} {
		startProc(t, "sim", "--host", "127.0.0.2", "--port", strconv.Itoa(port), "--role", "combined", "--model", "m",
			"--kv-events-endpoint", "tcp://127.0.0.1:"+strconv.Itoa(zmqPort), "--kv-events-topic", "kv@127.0.0.2@m")
		waitHTTP(t, "http://127.0.0.2:"+strconv.Itoa(port)+"/health")
	}
	epp, metricsURL := startEPP(t, fmt.Sprintf(`endpoints:
- {name: decode-a, address: 127.0.0.2, port: %d, labels: {llm-d.ai/role: decode}}
- {name: decode-b, address: 127.0.0.2, port: %d, labels: {llm-d.ai/role: decode}}
`, portA, portB), fmt.Sprintf(restartConfig, zmqPort))
	deadline := time.Now().Add(20 * time.Second)
	for testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_messages_total{result="ambiguous_source"}`) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("ambiguous port-less topics were never counted")
		}
		complete(t, "127.0.0.2:"+strconv.Itoa(portA), prompt(fmt.Sprintf("ambiguous %v", time.Now().UnixNano()), 64))
		route(t, epp, prompt("poke", 64), false) // the pool is listed from the first request on
		time.Sleep(200 * time.Millisecond)
	}
	for _, series := range []string{`pdgate_kv_events_messages_total{result="applied"}`, `pdgate_kv_events_messages_total{result="duplicate"}`,
		`pdgate_kv_events_resyncs_total{reason="sequence_reset"}`, `pdgate_kv_events_sequence_gaps_total`} {
		if v := testsupport.MetricSample(t, metricsURL, series); v != 0 {
			t.Errorf("%s = %v: two engines' streams were merged", series, v)
		}
	}
}
