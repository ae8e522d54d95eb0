package kvevents

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
)

// startProc runs the suite's binary name until the test ends; the test may kill and restart it.
func startProc(t *testing.T, name string, args ...string) *testsupport.Proc {
	t.Helper()
	return testsupport.StartProc(t, bin(name), nil, args...)
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

func waitHTTP(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := httpClient.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not up: %v", url, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// complete sends a completion straight to a simulator, as the gateway would after routing.
func complete(t *testing.T, addr, prompt string) {
	t.Helper()
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 2})
	resp, err := httpClient.Post("http://"+addr+"/v1/completions", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("completion on %s: %d %s", addr, resp.StatusCode, body)
	}
}

const eppConfig = `apiVersion: llm-d.ai/v1alpha1
kind: EndpointPickerConfig
plugins:
- type: prefill-filter
- type: decode-filter
- type: endpoint-notification-source
- type: metrics-data-source
- type: core-metrics-extractor
- type: precise-prefix-cache-producer
  parameters:
    tokenProcessorConfig:
      blockSizeTokens: 16
    kvEventsConfig:
      podDiscoveryConfig:
        socketPort: %d
- type: prefix-cache-scorer
  parameters:
    prefixMatchInfoProducerName: precise-prefix-cache-producer
- type: max-score-picker
- type: prefix-based-pd-decider
  parameters:
    nonCachedTokens: 32
- type: disagg-profile-handler
  parameters:
    deciders:
      prefill: prefix-based-pd-decider
dataLayer:
  sources:
  - pluginRef: metrics-data-source
    extractors:
    - pluginRef: core-metrics-extractor
  - pluginRef: endpoint-notification-source
    extractors:
    - pluginRef: precise-prefix-cache-producer
schedulingProfiles:
- name: prefill
  plugins:
  - pluginRef: prefill-filter
  - pluginRef: max-score-picker
- name: decode
  plugins:
  - pluginRef: decode-filter
  - pluginRef: prefix-cache-scorer
    weight: 2
  - pluginRef: max-score-picker
`

// startEPP runs bin/epp in standalone mode and returns its ext_proc client and metrics URL.
func startEPP(t *testing.T, endpoints, config string) (*extprocclient.Client, string) {
	t.Helper()
	dir := t.TempDir()
	eps, cfg := filepath.Join(dir, "endpoints.yaml"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(eps, []byte(endpoints), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := startProc(t, "epp", "--endpoints-file", eps, "--config-file", cfg, "--secure-serving=false",
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--pool-name", "kvevents-it", "-v", "2")
	return eppclient.DialStarted(t, p.Output, p.Exited(), 60*time.Second)
}

// decision is what the EPP told the gateway about one request.
type decision struct {
	status  int    // 412 etc. for an immediate answer, 0 when forwarded
	prefill string // x-prefiller-host-port ("" = decode only)
	dest    string
}

func route(t *testing.T, c *extprocclient.Client, prompt string, conditional bool) decision {
	t.Helper()
	h := map[string]string{}
	if conditional {
		h["prefer"] = "if-available"
	}
	body, _ := json.Marshal(map[string]any{"model": "m", "prompt": prompt, "max_tokens": 2})
	rt, _, done, err := eppclient.Open(c, "/v1/completions", h, body, 10*time.Second)
	done()
	if err != nil {
		t.Fatal(err)
	}
	if rt.Immediate != nil {
		return decision{status: extprocclient.ImmediateStatus(rt.Immediate)}
	}
	set := rt.SetHeaders()
	return decision{prefill: set["x-prefiller-host-port"], dest: set["x-gateway-destination-endpoint"]}
}

// eventually polls the EPP until cond holds for its decision on prompt.
func eventually(t *testing.T, what string, c *extprocclient.Client, prompt string, conditional bool, cond func(decision) bool) decision {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		d := route(t, c, prompt, conditional)
		if cond(d) {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: last decision %+v", what, d)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// prompt returns a completion prompt of n tokens (4 bytes each for the estimate tokenizer
// the EPP uses and the simulator's tokenizer alike), distinct per seed.
func prompt(seed string, n int) string {
	var b strings.Builder
	for b.Len() < 4*n {
		b.WriteString(seed)
		b.WriteString(" lorem ipsum dolor sit amet ")
	}
	return b.String()[:4*n]
}

func TestPreciseP2DOverZeroMQ(t *testing.T) {
	httpPort, zmqPort := testsupport.FreePortOn(t, "0.0.0.0"), testsupport.FreePortOn(t, "0.0.0.0")
	decodeAddr := "127.0.0.2:" + strconv.Itoa(httpPort)
	prefillAddr := "127.0.0.3:" + strconv.Itoa(httpPort)
	// The decode pod holds 40 blocks of 16 tokens; it publishes its cache, bound on its own
	// address (a pod's tcp://*:port). The prefill pod publishes nothing.
	decodeArgs := []string{"--host", "127.0.0.2", "--port", strconv.Itoa(httpPort), "--role", "combined", "--model", "m",
		"--kv-capacity-tokens", "640", "--kv-events-endpoint", "tcp://127.0.0.2:" + strconv.Itoa(zmqPort)}
	decode := startProc(t, "sim", decodeArgs...)
	startProc(t, "sim", "--host", "127.0.0.3", "--port", strconv.Itoa(httpPort), "--role", "combined", "--model", "m")
	waitHTTP(t, "http://"+decodeAddr+"/health")
	waitHTTP(t, "http://"+prefillAddr+"/health")

	endpoints := fmt.Sprintf(`endpoints:
- name: decode-0
  address: 127.0.0.2
  port: %d
  labels: {llm-d.ai/role: decode, inference.networking.k8s.io/engine-type: vllm}
- name: prefill-0
  address: 127.0.0.3
  port: %d
  labels: {llm-d.ai/role: prefill, inference.networking.k8s.io/engine-type: vllm}
`, httpPort, httpPort)
	epp, metricsURL := startEPP(t, endpoints, fmt.Sprintf(eppConfig, zmqPort))

	// The decode pod's subscriber is connected before its engine caches anything (what an
	// engine published before a subscriber joined is never heard of).
	deadline := time.Now().Add(20 * time.Second)
	for testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_subscribers{state="connected"}`) < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the EPP's KV-event subscribers did not connect")
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the SUB's subscription reaches the PUB

	p := prompt("system prompt A", 160) // 10 blocks
	disaggregated := func(d decision) bool { return d.status == 0 && d.prefill == prefillAddr && d.dest == decodeAddr }
	decodeOnly := func(d decision) bool { return d.status == 0 && d.prefill == "" && d.dest == decodeAddr }

	t.Run("nothing cached: disaggregated, if-available answered 412", func(t *testing.T) {
		eventually(t, "cold prompt disaggregates", epp, p, false, disaggregated)
		if d := route(t, epp, p, true); d.status != 412 {
			t.Fatalf("Prefer: if-available on a cold decode pod: %+v, want 412", d)
		}
	})

	t.Run("stored on the decode pod: decode-only, if-available forwarded", func(t *testing.T) {
		// The engine caches the prompt (a request served there) and reports it over ZeroMQ.
		// The subscriber may join after the first batches (ZeroMQ's slow joiner): repeat.
		deadline := time.Now().Add(20 * time.Second)
		for !decodeOnly(route(t, epp, p, false)) {
			if time.Now().After(deadline) {
				t.Fatalf("the stored prefix never reached the EPP (messages applied: %v)",
					testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_messages_total{result="applied"}`))
			}
			complete(t, decodeAddr, p)
			time.Sleep(200 * time.Millisecond)
		}
		if d := route(t, epp, p, true); d.status != 0 || d.dest != decodeAddr {
			t.Fatalf("Prefer: if-available with the prompt cached: %+v, want forwarded to %s", d, decodeAddr)
		}
	})

	t.Run("evicted on the decode pod: disaggregated again, 412 again", func(t *testing.T) {
		for i := 0; i < 4; i++ { // 4 × 10 new blocks through a 40-block cache
			complete(t, decodeAddr, prompt(fmt.Sprintf("other document %d", i), 160))
		}
		eventually(t, "evicted prompt disaggregates", epp, p, false, disaggregated)
		if d := route(t, epp, p, true); d.status != 412 {
			t.Fatalf("Prefer: if-available after eviction: %+v, want 412", d)
		}
		if v := testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_events_total{type="BlockRemoved"}`); v == 0 {
			t.Error("no BlockRemoved applied")
		}
	})

	t.Run("killed and restarted engine is never scored on stale blocks", func(t *testing.T) {
		deadline := time.Now().Add(20 * time.Second)
		for !decodeOnly(route(t, epp, p, false)) {
			if time.Now().After(deadline) {
				t.Fatal("the prompt was not cached again")
			}
			complete(t, decodeAddr, p)
			time.Sleep(200 * time.Millisecond)
		}
		decode.Kill()
		decode.Start()
		waitHTTP(t, "http://"+decodeAddr+"/health")
		// The restarted engine's cache is empty: the EPP must disaggregate (it dropped the
		// blocks when the stream broke, or at the restarted stream's sequence reset).
		eventually(t, "restarted engine disaggregates", epp, p, false, disaggregated)
		if d := route(t, epp, p, true); d.status != 412 {
			t.Fatalf("Prefer: if-available after the restart: %+v, want 412", d)
		}
		if v := testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_resyncs_total{reason="disconnect"}`) +
			testsupport.MetricSample(t, metricsURL, `pdgate_kv_events_resyncs_total{reason="sequence_reset"}`); v == 0 {
			t.Error("the restart was not counted as a resync")
		}
		// And it learns the new cache again. An engine reports a block once, when it is
		// stored; what it stored before the subscriber reconnected is never heard of (no
		// replay), so each try caches a fresh prompt.
		deadline = time.Now().Add(20 * time.Second)
		for i := 0; ; i++ {
			q := prompt(fmt.Sprintf("after the restart %d", i), 160)
			complete(t, decodeAddr, q)
			time.Sleep(300 * time.Millisecond)
			if decodeOnly(route(t, epp, q, false)) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the restarted engine's stores never reached the EPP")
			}
		}
	})
}
