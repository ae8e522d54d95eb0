// Package replicaledger runs forecast admission on two EPP replicas that share one ledger
// through Redis, in the lab: real simulators, sidecars, two EPP processes with a dev gateway
// each, and a real redis-server that the test kills mid-run.
package replicaledger

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

// kvTokens is each decode simulator's KV cache. A request reserves its prompt (~60 tokens) and
// its output budget (maxTokens) on its decode pod, so one pod holds about 20 and the fleet of
// two about 40 at once; the TTFT and TPOT forecasts stay far inside the objective at that
// load, so the KV cache is what admission guards.
const (
	kvTokens  = 16000
	maxTokens = 700
)

// topology: the EPPs scrape the engines every 2 s. A replica sees the other's sequences
// through the shared ledger (synced every 50 ms) or through the scrape; at the lab's usual
// 50 ms scrape the scrape alone shows them within the gap between two requests (two replicas
// without Redis admitted 42 against one replica's 40 there), so the test would not see whether
// the ledger is shared. At 2 s they admitted 57 without it.
const topology = `name: replica-ledger
description: vLLM P/D, 1 prefill + 2 decode with %d KV tokens each, forecast admission on a Redis-shared ledger
eppConfig: epp.yaml
simProfile: %s
eppArgs: ["--refresh-metrics-interval=2s"]
pods:
- {name: prefill, role: prefill, roleset: rs, engine: vllm, kvConnector: nixl, count: 1}
- {name: decode, role: decode, roleset: rs, engine: vllm, kvConnector: nixl, count: 2, simArgs: ["--kv-capacity-tokens=%d"]}
`

// tally is one run's answers. A request is lost when it gets no answer, or one other than a
// completion (200) or a refusal with llm-d's drop reason (429).
type tally struct {
	mu       sync.Mutex
	sent     int
	admitted int
	refused  int
	lost     []string
}

func (tl *tally) add(status int, reason string, err error) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	tl.sent++
	switch {
	case err != nil:
		tl.lost = append(tl.lost, err.Error())
	case status == http.StatusOK:
		tl.admitted++
	case status == http.StatusTooManyRequests && reason != "":
		tl.refused++
	default:
		tl.lost = append(tl.lost, fmt.Sprintf("status %d reason %q", status, reason))
	}
}

func (tl *tally) String() string {
	return fmt.Sprintf("sent %d, admitted %d, refused %d, lost %d", tl.sent, tl.admitted, tl.refused, len(tl.lost))
}

// complete sends one completion with a fresh prompt and reads it to the end.
func complete(client *http.Client, url, model string, n int) (int, string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": maxTokens,
		"prompt": fmt.Sprintf("Request %d. %s", n, strings.Repeat(fmt.Sprintf("Question %d about replicas. ", n), 10))})
	resp, err := client.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return resp.StatusCode, "", fmt.Errorf("status %d, body cut: %w", resp.StatusCode, err)
	}
	return resp.StatusCode, resp.Header.Get("x-llm-d-request-dropped-reason"), nil
}

// offer sends n requests, one every gap, through the gateways in turn, each in flight until
// it ends; midway (after n/2 when not nil) runs. It returns once every request is answered.
func offer(client *http.Client, urls []string, model string, n int, gap time.Duration, seq *int, midway func()) *tally {
	tl := &tally{}
	var wg sync.WaitGroup
	for i := range n {
		if i == n/2 && midway != nil {
			midway()
		}
		*seq++
		wg.Add(1)
		go func(url string, id int) {
			defer wg.Done()
			tl.add(complete(client, url, model, id))
		}(urls[i%len(urls)], *seq)
		time.Sleep(gap)
	}
	wg.Wait()
	return tl
}

// offered requests, one every gap, make about twice what the fleet holds at once.
const offered, gap = 80, 50 * time.Millisecond

// oneThenTwo offers the same load through the first replica's gateway alone, then through both
// gateways in turn, and checks that no request is lost and that two replicas admit within 10 %
// of what one admits; it returns the one replica's tally.
func oneThenTwo(t *testing.T, client *http.Client, urlA, urlB, model string, seq *int) *tally {
	t.Helper()
	one := offer(client, []string{urlA}, model, offered, gap, seq, nil)
	t.Logf("one EPP:  %s", one)
	two := offer(client, []string{urlA, urlB}, model, offered, gap, seq, nil)
	t.Logf("two EPPs: %s (%+.1f %% against one)", two, 100*float64(two.admitted-one.admitted)/float64(max(one.admitted, 1)))
	for _, tl := range []*tally{one, two} {
		if len(tl.lost) > 0 {
			t.Errorf("lost requests: %v", tl.lost)
		}
	}
	if d := two.admitted - one.admitted; 10*d > one.admitted || -10*d > one.admitted {
		t.Errorf("two EPPs admitted %d, one EPP %d: want within 10 %%", two.admitted, one.admitted)
	}
	return one
}

// metric reads one sample ("name" or "name{labels}") from an EPP's /metrics.
func metric(client *http.Client, addr, sample string) (float64, bool) {
	resp, err := client.Get("http://" + addr + "/metrics")
	if err != nil {
		return 0, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if name, val, ok := strings.Cut(sc.Text(), " "); ok && name == sample {
			v, err := strconv.ParseFloat(val, 64)
			return v, err == nil
		}
	}
	return 0, false
}

// startReplicas starts a fresh redis-server and the lab's fleet on subnet under recommended's
// forecast admission with pd-token-ledger shared through Redis (each replica names itself)
// (gates, when set, is the config's featureGates line), then a second EPP replica behind its
// own gateway: the Redis server, the lab (its gateway goes to the first replica) and the second
// gateway's URL.
func startReplicas(t *testing.T, subnet, gates string) (*redistest.Server, *lab.Lab, string) {
	t.Helper()
	srv := redistest.Start(t, 0)
	dir := t.TempDir()
	profile, err := filepath.Abs(filepath.Join(testsupport.RepoRoot(), "config/sim/llama3-8b-h100.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := testsupport.LedgerAdmission{Redis: srv.Addr, TTFT: "2s", KVCapacityTokens: kvTokens}.Config()
	if gates != "" {
		cfg = strings.Replace(cfg, "plugins:\n", gates+"\nplugins:\n", 1)
	}
	if err := os.WriteFile(filepath.Join(dir, "epp.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	topo := filepath.Join(dir, "topology.yaml")
	if err := os.WriteFile(topo, []byte(fmt.Sprintf(topology, kvTokens, profile, kvTokens)), 0o644); err != nil {
		t.Fatal(err)
	}
	l := labtest.Start(t, lab.Options{Topology: topo, Subnet: subnet, Out: io.Discard, Err: io.Discard})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	urlB, err := l.StartRouter(ctx)
	if err != nil {
		t.Fatalf("second EPP replica: %v", err)
	}
	return srv, l, urlB
}

// Two EPP replicas, each behind its own gateway, share pd-token-ledger's leases through one
// redis-server. Requests whose output budgets fill the decode pods' KV cache arrive at about
// twice what the fleet holds at once: through one gateway, then through both in turn. The two
// replicas admit within 10 % of what one admits, because each forecasts on the other's leases.
// Then Redis is killed halfway through the same load: every request is still answered (a
// completion or a 429 with its reason), and both replicas report that they are degraded.
func TestTwoEPPReplicasAdmitAsOneInTheLab(t *testing.T) {
	srv, l, urlB := startReplicas(t, "127.0.61", "")
	eppA, eppB := l.Plan.PrefillReleaseAddress(), l.RouterMetrics[0]
	client := &http.Client{Timeout: 3 * time.Minute}
	model := l.Plan.Topology.Model
	seq := 0
	if one := oneThenTwo(t, client, l.URL, urlB, model, &seq); one.refused == 0 || one.admitted < offered/4 {
		t.Fatalf("one EPP at about twice the fleet's capacity: %s, want some admitted and some refused", one)
	}

	for _, addr := range []string{eppA, eppB} {
		if v, ok := metric(client, addr, "pdgate_token_load_shared_degraded"); !ok || v != 0 {
			t.Fatalf("EPP %s before the outage: pdgate_token_load_shared_degraded = %v (found %v), want 0", addr, v, ok)
		}
	}
	killed := offer(client, []string{l.URL, urlB}, model, offered, gap, &seq, func() { srv.Kill() })
	t.Logf("Redis killed halfway: %s", killed)
	if len(killed.lost) > 0 {
		t.Errorf("lost requests with Redis going down: %v", killed.lost)
	}
	if killed.admitted == 0 {
		t.Errorf("nothing admitted while Redis went down: %s", killed)
	}
	for _, addr := range []string{eppA, eppB} {
		testsupport.Eventually(t, 30*time.Second, addr+" reports the shared ledger degraded", func() bool {
			v, ok := metric(client, addr, "pdgate_token_load_shared_degraded")
			return ok && v == 1
		})
	}
}
