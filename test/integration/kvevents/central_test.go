package kvevents

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// centralDecider are the plugins both central-mode configs run beside the scorer: one
// profile of decode-filter and max-score-picker, and prefix-based-pd-decider, which no
// profile handler calls here; the 412 gate asks it.
const centralDecider = `- type: decode-filter
- type: max-score-picker
- type: single-profile-handler
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 32
`

// llm-d's deprecated all-in-one scorer in central mode, as its sim-epp-kvcache config runs it:
// the EPP binds one SUB socket, the engines connect and name themselves in the topic. The
// scorer routes each prompt to the pod that caches it, and the 412 gate (a
// prefix-based-pd-decider with no profile handler calling it) decides on the scorer's data.
const centralConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: precise-prefix-cache-scorer
  parameters:
    tokenProcessorConfig:
      blockSize: 16
      hashSeed: "42"
    kvEventsConfig:
      zmqEndpoint: tcp://127.0.0.1:%d
    indexerConfig:
      tokenizersPoolConfig:
        modelName: m
      kvBlockIndexConfig:
        enableMetrics: false
        metricsLoggingInterval: 60000000000
` + centralDecider + `schedulingProfiles:
- name: default
  plugins:
  - pluginRef: decode-filter
  - pluginRef: max-score-picker
  - pluginRef: precise-prefix-cache-scorer
    weight: 10
`

func TestCentralModeLegacyScorerRoutesToTheCachingPod(t *testing.T) {
	httpPort, zmqPort := testsupport.FreePort(t), testsupport.FreePort(t)
	addrs := []string{"127.0.0.2:" + strconv.Itoa(httpPort), "127.0.0.3:" + strconv.Itoa(httpPort)}
	for _, host := range []string{"127.0.0.2", "127.0.0.3"} {
		// tcp://127.0.0.1:port is not the sim's own address: it connects, as vLLM does.
		startProc(t, "sim", "--host", host, "--port", strconv.Itoa(httpPort), "--role", "combined", "--model", "m",
			"--kv-events-endpoint", "tcp://127.0.0.1:"+strconv.Itoa(zmqPort), "--kv-events-format", "array")
	}
	for _, a := range addrs {
		waitHTTP(t, "http://"+a+"/health")
	}
	endpoints := fmt.Sprintf(`endpoints:
- name: decode-a
  address: 127.0.0.2
  port: %d
  labels: {llm-d.ai/role: decode}
- name: decode-b
  address: 127.0.0.3
  port: %d
  labels: {llm-d.ai/role: decode}
`, httpPort, httpPort)
	epp, metricsURL := startEPP(t, endpoints, fmt.Sprintf(centralConfig, zmqPort))

	for round := 0; round < 2; round++ {
		for i, holder := range addrs {
			// Each try caches a fresh prompt on holder (an engine reports a block once; the
			// first batches may precede the connection).
			deadline := time.Now().Add(20 * time.Second)
			for try := 0; ; try++ {
				p := prompt(fmt.Sprintf("round %d document %d try %d", round, i, try), 160)
				complete(t, holder, p)
				time.Sleep(300 * time.Millisecond)
				// Routed to the holder and forwarded by the gate: the EPP knows the pod caches
				// the prompt (routing alone could be a tie won by chance before the events came).
				d := route(t, epp, p, false)
				if g := route(t, epp, p, true); d.dest == holder && g.status == 0 && g.dest == holder {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("a prompt cached on %s is routed to %+v (messages applied %v)", holder, d,
						testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_messages_total{result="applied"}`))
				}
			}
		}
	}
	if d := route(t, epp, prompt("never seen anywhere", 160), true); d.status != 412 {
		t.Fatalf("Prefer: if-available for an uncached prompt: %+v, want 412", d)
	}
}
