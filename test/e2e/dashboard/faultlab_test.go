package dashboard

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

// faultTopology is the second lab: SGLang, whose sidecar aborts a decode on the engine
// (/abort_request) when its prefill fails or its watchdog fires, the only dialect that does.
// Two rolesets and a combined pod, so that the P/D tier can overflow and the fast paths have
// two pods to choose between. A stream silent for 3 s trips the sidecar's watchdog: at 1 s a
// busy 2-core machine tripped it on healthy streams too.
const faultTopology = `name: dashboard-faults
description: SGLang, 2 prefill + 2 decode (rolesets rs-a, rs-b) + 1 combined, testdata/faults-epp.yaml
eppConfig: epp.yaml
simProfile: %s
timeScale: 1
sidecarArgs: ["--decode-stream-idle-timeout=3s"]
pods:
- {name: prefill-a, role: prefill, roleset: rs-a, engine: sglang}
- {name: decode-a, role: decode, roleset: rs-a, engine: sglang}
- {name: prefill-b, role: prefill, roleset: rs-b, engine: sglang}
- {name: decode-b, role: decode, roleset: rs-b, engine: sglang}
- {name: combined, role: combined, engine: sglang}
`

// startFaultLab writes testdata/faults-epp.yaml with the Redis address and the topology, and
// starts the lab with its own Prometheus.
func startFaultLab(t *testing.T, prom, redisAddr string) *lab.Lab {
	t.Helper()
	dir := t.TempDir()
	raw, err := os.ReadFile("testdata/faults-epp.yaml")
	if err != nil {
		t.Fatal(err)
	}
	epp := strings.ReplaceAll(string(raw), "REDIS_ADDRESS", redisAddr)
	if err := os.WriteFile(filepath.Join(dir, "epp.yaml"), []byte(epp), 0o644); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(dir, "topology.yaml")
	profile := filepath.Join(testsupport.RepoRoot(), "config/sim/llama3-8b-h100.yaml")
	if err := os.WriteFile(topo, []byte(fmt.Sprintf(faultTopology, profile)), 0o644); err != nil {
		t.Fatal(err)
	}
	return labtest.Start(t, lab.Options{Topology: topo, Subnet: "127.0.48", Prometheus: prom})
}

// faultLabRun drives what the recommended lab never reaches, each through the real path:
//   - a burst of prefills made 2 s slower (the simulator's prefill-slow fault) queues work on
//     the P/D pods: requests sent meanwhile overflow to the idle combined pod, and every
//     ledger charge of the burst outlives the ledger's 1 s TTL, so the janitor force-releases it;
//   - mixed traffic spreads the decode pods' loads past the fast paths' thresholds, every
//     request is decided by pd-profile-handler, and the ledger syncs with Redis throughout;
//   - a prefill that fails (prefill-fail) makes the sidecar abort its decode on the engine;
//   - a stream that stalls after two tokens (stall-after) trips the sidecar's watchdog, which
//     aborts that decode too;
//   - a routing-strategy header naming no strategy is refused by aibrix-pd-pair.
func faultLabRun(t *testing.T, prom string, s *sampler) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	redis := redistest.Start(t, 0)
	l := startFaultLab(t, prom, redis.Addr)
	model := l.Plan.Topology.Model

	hotPD(t, l)
	gen, err := workload.New("mixed", workload.Options{Model: model, Seed: 2, TimeScale: l.Plan.Topology.TimeScale})
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: gen, Duration: 8 * time.Second, Rate: 8, Concurrency: 8, Trace: true, Classify: l.Plan.Classify})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("traffic: %d requests, statuses %v, decisions %v", res.RequestsSent, res.ResponsesByStatus, res.Decisions)
	s.sample(ctx, t, l, "after the traffic")

	prompt := strings.Repeat("An SGLang prefill that fails makes the sidecar abort its decode. ", 30)
	status, hdr, _ := testsupport.PostJSON(t, l.URL+"/v1/completions", map[string]string{"x-sim-fault": "prefill-fail"},
		map[string]any{"model": model, "prompt": prompt, "max_tokens": 8})
	if status < 500 || hdr.Get("x-error-pd-prefill") != "true" {
		t.Errorf("prefill-fail: status %d, x-error-pd-prefill %q; want a 5xx naming the prefill", status, hdr.Get("x-error-pd-prefill"))
	}
	stalled(t, l)
	status, hdr, body := testsupport.PostJSON(t, l.URL+"/v1/completions", map[string]string{"routing-strategy": "no-such-strategy"},
		map[string]any{"model": model, "prompt": "hello", "max_tokens": 4})
	if status != http.StatusBadRequest || hdr.Get("x-error-routing") != "true" {
		t.Errorf("unknown routing strategy: status %d, x-error-routing %q (%s); want 400 from aibrix-pd-pair", status, hdr.Get("x-error-routing"), body)
	}
	// The aborts are sent in the background once the sidecar answered; then two more scrapes.
	time.Sleep(3 * lab.PrometheusScrapeInterval)
	s.sample(ctx, t, l, "after the faults")
	for _, q := range []string{"sum by (cause) (pdgate_pd_combined_total)", "sum by (side) (pdgate_pd_fast_path_total)",
		"sum by (decision_type) (pdgate_pd_decisions_total)", "sum by (result) (pdgate_token_load_shared_syncs_total)"} {
		logSeries(ctx, t, l, q)
	}
	for _, m := range []string{"pdgate_pd_select_failures_total", "pdgate_token_load_force_released_total",
		"pdgate_sidecar_decode_watchdog_total", "pdgate_sidecar_decode_aborts_total"} {
		requireCounted(ctx, t, l, m)
	}
}

// hotPD sends 8 requests whose prefills take 2 s longer and, while they wait, 6 plain ones.
// The slow prefills queue on the prefill pods and their decodes wait for the KV (SGLang's
// decode prealloc queue), so the P/D pods' AIBrix queue scores pass 1 while the combined
// pod's stays at 0: aibrix-pd-pair's combined overflow.
func hotPD(t *testing.T, l *lab.Lab) {
	t.Helper()
	var wg sync.WaitGroup
	statuses := make([]int, 14)
	client := &http.Client{Timeout: time.Minute}
	send := func(i int, fault string) {
		defer wg.Done()
		hdr := map[string]string{"x-pdgate-trace": "1"}
		if fault != "" {
			hdr["x-sim-fault"] = fault
		}
		prompt := fmt.Sprintf("Request %d of the hot burst. %s", i, strings.Repeat("Queued work makes the P/D tier hot. ", 20))
		// Not PostJSON: its t.Fatal must not run outside the test's goroutine.
		req, err := testsupport.JSONRequest(context.Background(), l.URL+"/v1/completions", hdr,
			map[string]any{"model": l.Plan.Topology.Model, "prompt": prompt, "max_tokens": 8})
		if err == nil {
			statuses[i] = testsupport.Do(client, req, false).Status
		}
	}
	for i := range 8 {
		wg.Add(1)
		go send(i, "prefill-slow=2s")
	}
	// Two EPP metric refreshes and a bit: the queues are in the scores the picks read.
	time.Sleep(700 * time.Millisecond)
	for i := 8; i < 14; i++ {
		wg.Add(1)
		go send(i, "")
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	t.Logf("hot burst: statuses %v", statuses)
}

// stalled streams a completion whose decode stops after two tokens: the sidecar's stream-idle
// watchdog cuts it after 3 s and aborts the decode on the engine.
func stalled(t *testing.T, l *lab.Lab) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := testsupport.JSONRequest(ctx, l.URL+"/v1/completions", map[string]string{"x-sim-fault": "stall-after=2"},
		map[string]any{"model": l.Plan.Topology.Model, "prompt": "Tell a long story about a stalled stream.", "max_tokens": 64, "stream": true})
	if err != nil {
		t.Fatal(err)
	}
	a := testsupport.Do(http.DefaultClient, req, true)
	if a.Status != http.StatusOK || a.Done {
		t.Errorf("stalled stream: status %d, [DONE] %v (%v); want a 200 stream cut before [DONE]", a.Status, a.Done, a.Err)
	}
}

// logSeries logs a query's answer: which of the load-driven paths this run took, and how often.
func logSeries(ctx context.Context, t *testing.T, l *lab.Lab, query string) {
	t.Helper()
	series, err := l.QueryPrometheus(ctx, query)
	if err != nil {
		t.Errorf("%s: %v", query, err)
		return
	}
	parts := make([]string, 0, len(series))
	for _, se := range series {
		parts = append(parts, fmt.Sprintf("%v=%v", se.Metric, se.Value[1]))
	}
	t.Logf("%s: %s", query, strings.Join(parts, " "))
}
