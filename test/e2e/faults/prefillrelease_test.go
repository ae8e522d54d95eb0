package faults

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/test/testsupport"
)

// TestPrefillChargeReleasedWhenPrefillReturns: a non-streaming request whose
// decode takes seconds, on AIBrix's token_load policies (the ledger charges the prefill pod). The EPP (--prefill-release-address, as the lab starts it) hands the
// sidecar a signed callback; the sidecar calls it when the prefill leg returns, so the prefill
// pod's active-token charge ends while the decode is still running (its KV charge stays until
// the response ends). Before, the active part was released only when the response headers
// reached the EPP: for a non-streaming request, at the end of generation.
func TestPrefillChargeReleasedWhenPrefillReturns(t *testing.T) {
	topo := topology(t, `name: prefill-release
eppConfig: ../aibrix/token-load.yaml
simProfile: ../sim/llama3-8b-h100.yaml
timeScale: 1
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: vllm, kvConnector: nixl}
- {name: decode-a, role: decode, roleset: rs-a, engine: vllm, kvConnector: nixl}
`)
	c := startCluster(t, topo, "127.0.89", nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// Let the warm-up request's charges settle.
	waitGauges(t, c, func(active, kv float64) bool { return active == 0 && kv == 0 })

	done := make(chan result, 1)
	go func() {
		done <- send(ctx, c.URL(), request{maxTokens: 700, prompt: strings.Repeat("Disaggregate the prefill of this prompt. ", 60)})
	}()
	var sawCharge bool
	var releasedAt time.Time
	for releasedAt.IsZero() {
		select {
		case r := <-done:
			t.Fatalf("the response ended (%s after %v, charge seen %v) before the prefill pod's active charge was released with its KV charge still held",
				outcome(r), r.Elapsed, sawCharge)
		case <-time.After(20 * time.Millisecond):
		}
		active, kv := prefillGauges(t, c)
		sawCharge = sawCharge || kv > 0
		if kv > 0 && active == 0 {
			releasedAt = time.Now()
		}
	}
	r := <-done
	if outcome(r) != "200" || r.Header.Get("x-pdgate-prefill-outcome") != "ok" {
		t.Fatalf("request: %s outcome %q: %s", outcome(r), r.Header.Get("x-pdgate-prefill-outcome"), r.Body)
	}
	// Released with the leg, not with the response: well before the response ended.
	if lead := time.Since(releasedAt); lead < 500*time.Millisecond {
		t.Fatalf("active charge released only %v before the response ended (request took %v)", lead, r.Elapsed)
	}
	m := labelled(t, c.eppMetricsURL())
	if m[`pdgate_epp_prefill_release_callbacks_total{result="ok"}`] < 1 || m[`pdgate_epp_prefill_release_callbacks_total{result="bad_signature"}`] != 0 {
		t.Fatalf("EPP callback counts: ok %v bad_signature %v", m[`pdgate_epp_prefill_release_callbacks_total{result="ok"}`],
			m[`pdgate_epp_prefill_release_callbacks_total{result="bad_signature"}`])
	}
	sidecarOK := 0.0
	for name, url := range c.metricsURLs() {
		if strings.HasPrefix(name, "sidecar-decode-a") {
			sidecarOK += labelled(t, url)[`pdgate_sidecar_prefill_release_callbacks_total{result="ok"}`]
		}
	}
	if sidecarOK < 1 {
		t.Fatalf("sidecar callback count %v", sidecarOK)
	}
	waitGauges(t, c, func(active, kv float64) bool { return active == 0 && kv == 0 })
}

// prefillGauges reads the EPP's ledger gauges of the prefill pod.
func prefillGauges(t *testing.T, c *cluster) (active, kv float64) {
	t.Helper()
	for k, v := range labelled(t, c.eppMetricsURL()) {
		if !strings.Contains(k, `pod_name="prefill-a`) {
			continue
		}
		switch {
		case strings.HasPrefix(k, "pdgate_token_load_active_tokens{"):
			active += v
		case strings.HasPrefix(k, "pdgate_token_load_kv_tokens{"):
			kv += v
		}
	}
	return active, kv
}

// labelled reads a /metrics page into "name{labels}" -> value (lab.ParseMetrics sums the
// label sets of a name).
func labelled(t *testing.T, url string) map[string]float64 {
	t.Helper()
	code, b, err := testsupport.Get(context.Background(), url)
	if err != nil || code != 200 {
		t.Fatalf("%s: %d %v", url, code, err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err == nil {
			out[line[:i]] = v
		}
	}
	return out
}

func waitGauges(t *testing.T, c *cluster, ok func(active, kv float64) bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		active, kv := prefillGauges(t, c)
		if ok(active, kv) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("prefill-a gauges active=%v kv=%v", active, kv)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
