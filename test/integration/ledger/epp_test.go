package ledger

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

type fakePod struct {
	name, role string
	port       int
}

// startPods serves metrics for each pod on its own loopback port.
func startPods(t *testing.T, names map[string]string) map[string]fakePod {
	return servePods(t, names, testsupport.DrainingVLLMMetrics(0))
}

// servePods serves h for each pod (name → role) on its own loopback port.
func servePods(t *testing.T, names map[string]string, h http.Handler) map[string]fakePod {
	t.Helper()
	pods := map[string]fakePod{}
	for name, role := range names {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		srv := &http.Server{Handler: h, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(l) }()
		t.Cleanup(func() { _ = srv.Close() })
		pods[name] = fakePod{name: name, role: role, port: l.Addr().(*net.TCPAddr).Port}
	}
	return pods
}

// eppConfig is the ledger suites' P/D config with the ledger shared through Redis (address,
// then replica ID) and no admission.
var eppConfig = testsupport.LedgerPDConfig(`    redis: {address: "%s", replicaID: "%s", syncIntervalMs: 100, livenessTTLSeconds: 2, timeoutMs: 50}
`, "")

// eppProc is a real EPP process in standalone mode plus an ext_proc client.
type eppProc struct {
	name    string
	client  *extprocclient.Client
	proc    *testsupport.Proc
	metrics string // URL of the EPP's /metrics
	byAddr  map[string]string
	seq     atomic.Int64
}

func startEPPProc(t *testing.T, name, redisAddr string, pods map[string]fakePod) *eppProc {
	return startEPPWith(t, name, fmt.Sprintf(eppConfig, redisAddr, name), "ledger-it", pods)
}

// startEPPWith starts a real EPP in standalone mode on config, with pods as its endpoints.
func startEPPWith(t *testing.T, name, config, pool string, pods map[string]fakePod) *eppProc {
	t.Helper()
	dir := t.TempDir()
	var eps strings.Builder
	eps.WriteString("endpoints:\n")
	byAddr := map[string]string{}
	for _, p := range pods {
		fmt.Fprintf(&eps, "- name: %s\n  address: 127.0.0.1\n  port: %d\n  labels: {role-name: %s, roleset-name: rs, model.aibrix.ai/engine: vllm, model.aibrix.ai/name: m}\n",
			p.name, p.port, p.role)
		byAddr["127.0.0.1:"+strconv.Itoa(p.port)] = p.name
	}
	epsPath, cfgPath := filepath.Join(dir, "endpoints.yaml"), filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(epsPath, []byte(eps.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfgPath, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	p := testsupport.StartProc(t, eppBin(), nil, "--endpoints-file", epsPath, "--config-file", cfgPath, "--secure-serving=false",
		"--grpc-port", "0", "--grpc-health-port", "0", "--metrics-port", "0", "--pool-name", pool)
	t.Cleanup(func() { p.Stop(syscall.SIGINT, 20*time.Second) }) // a replica leaves the shared ledger as in production
	client, murl := eppclient.DialStarted(t, p.Output, p.Exited(), 60*time.Second)
	return &eppProc{name: name, client: client, proc: p, byAddr: byAddr, metrics: murl}
}

// pick is what the EPP answered for one request.
type pickResult struct {
	status  int // immediate response status, 0 when forwarded
	body    string
	decode  string
	prefill string
}

func completionBody(tokens int) string {
	b, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("abcd", tokens), "max_tokens": 8})
	return string(b)
}

// open sends one request over a real ext_proc stream with pdgate's ext_proc client (the one
// the dev gateway uses) and leaves the stream open (the response is "in flight", so the
// ledger holds its charges) until the returned func is called; closing the stream runs GIE's
// final end-of-stream hook, which releases the charges.
func (e *eppProc) open(t *testing.T, body string) (pickResult, func()) {
	t.Helper()
	r, closeFn, err := e.tryOpen(body)
	if err != nil {
		t.Fatalf("%s: %v", e.name, err)
	}
	return r, closeFn
}

// tryOpen is open for goroutines other than the test's: it returns the error instead.
func (e *eppProc) tryOpen(body string) (pickResult, func(), error) {
	id := fmt.Sprintf("%s-%d", e.name, e.seq.Add(1))
	rt, _, closeFn, err := eppclient.Open(e.client, "/v1/completions", map[string]string{"x-request-id": id}, []byte(body), 30*time.Second)
	if err != nil {
		closeFn()
		return pickResult{}, func() {}, err
	}
	var r pickResult
	if rt.Immediate != nil {
		r.status, r.body = rt.Status(), string(rt.Immediate.GetBody())
		return r, closeFn, nil
	}
	if v, ok := rt.Header("x-gateway-destination-endpoint"); ok {
		r.decode = e.byAddr[v]
	}
	if v, ok := rt.Header("x-prefiller-host-port"); ok {
		r.prefill = e.byAddr[v]
	}
	return r, closeFn, nil
}

// traffic sends short requests through the replicas in turn, one after the other, until
// stopped: the load that runs while Redis dies and comes back.
type traffic struct {
	stop chan struct{}
	done chan struct{}
	ok   int
	lost []string
}

func startTraffic(eps ...*eppProc) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		for i := 0; ; i++ {
			select {
			case <-tr.stop:
				return
			default:
			}
			e := eps[i%len(eps)]
			r, closeFn, err := e.tryOpen(completionBody(50))
			closeFn()
			switch {
			case err != nil:
				tr.lost = append(tr.lost, fmt.Sprintf("%s: %v", e.name, err))
			case r.status != 0 || r.decode == "" || r.prefill != "prefill-0":
				tr.lost = append(tr.lost, fmt.Sprintf("%s: %+v", e.name, r))
			default:
				tr.ok++
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	return tr
}

// finish stops the traffic and fails the test if any request was lost.
func (tr *traffic) finish(t *testing.T) {
	t.Helper()
	close(tr.stop)
	<-tr.done
	if len(tr.lost) > 0 || tr.ok == 0 {
		t.Fatalf("traffic across the Redis outage: %d served, %d lost: %v", tr.ok, len(tr.lost), tr.lost)
	}
	t.Logf("traffic across the Redis outage: %d requests served, none lost", tr.ok)
}

// eventuallyMetric waits (bounded) until a replica's sample satisfies cond.
func (e *eppProc) eventuallyMetric(t *testing.T, sample string, cond func(float64) bool) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, e.name+" "+sample, func() bool { return cond(e.scrape(t)[sample]) })
}

// picks opens n short requests one after the other, all held in flight until the round ends,
// and counts the decode picks. With only local charges the token_load picks alternate between
// the decode pods (deterministic, whatever the tie-breaking); a pod carrying another replica's
// 40k-token prompt gets none of them. Any error answer fails the test.
func (e *eppProc) picks(t *testing.T, n int) map[string]int {
	t.Helper()
	seen := map[string]int{}
	var closers []func()
	defer func() {
		for _, c := range closers {
			c()
		}
		time.Sleep(50 * time.Millisecond) // let the closed streams' releases land
	}()
	for i := 0; i < n; i++ {
		r, done := e.open(t, completionBody(50))
		closers = append(closers, done)
		if r.status != 0 || r.decode == "" || r.prefill != "prefill-0" {
			t.Fatalf("%s: request failed or was not disaggregated: %+v\n%s", e.name, r, e.proc.Output())
		}
		seen[r.decode]++
	}
	return seen
}

// eventuallyPicks repeats rounds of n requests (bounded) until cond holds for a round. Rounds
// are paced (100 ms apart) and the cap leaves them 30 s, well past the ledger's sync interval
// and liveness TTL, so neither a fast machine (rounds used up early) nor a slow one (deadline
// first) decides the outcome.
func eventuallyPicks(t *testing.T, e *eppProc, what string, n int, cond func(map[string]int) bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	var last map[string]int
	for round := 0; round < 300 && time.Now().Before(deadline); round++ {
		if last = e.picks(t, n); cond(last) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: never held; last round of %d picks on %s: %v", what, n, e.name, last)
}

// TestTwoEPPReplicasShareDecodeLedger runs two real EPP processes (standalone mode) with the
// AIBrix token_load policies against a real redis-server: a long prompt in flight through
// replica A steers replica B's decode picks; killing Redis degrades both to their local
// ledgers without failed requests; restarting it resumes sharing.
func TestTwoEPPReplicasShareDecodeLedger(t *testing.T) {
	port := testsupport.FreePort(t)
	srv := redistest.Start(t, port)
	pods := startPods(t, map[string]string{"prefill-0": "prefill", "decode-0": "decode", "decode-1": "decode"})
	a := startEPPProc(t, "epp-a", srv.Addr, pods)
	b := startEPPProc(t, "epp-b", srv.Addr, pods)

	bothUsed := func(s map[string]int) bool { return s["decode-0"] > 0 && s["decode-1"] > 0 }
	// Both replicas serve and B spreads over both decode pods while nothing is in flight.
	a.picks(t, 4)
	eventuallyPicks(t, b, "B uses both decode pods with empty ledgers", 20, bothUsed)

	// A long prompt (40k tokens) stays in flight on A.
	long, releaseLong := a.open(t, completionBody(40000))
	defer releaseLong()
	if long.status != 0 || long.decode == "" {
		t.Fatalf("long request on A failed: %+v", long)
	}
	other := map[string]string{"decode-0": "decode-1", "decode-1": "decode-0"}[long.decode]
	onlyOther := func(s map[string]int) bool { return s[other] == 20 }
	eventuallyPicks(t, b, "B steered away from the pod holding A's long prompt", 20, onlyOther)

	// Redis dies under load: both replicas keep answering (local ledgers only), say they are
	// degraded, and B uses both pods again.
	const degraded, fallbacks = "pdgate_token_load_shared_degraded", "pdgate_token_load_shared_fallbacks_total"
	for _, e := range []*eppProc{a, b} {
		e.eventuallyMetric(t, degraded, func(v float64) bool { return v == 0 })
	}
	load := startTraffic(a, b)
	srv.Kill()
	for _, e := range []*eppProc{a, b} {
		e.eventuallyMetric(t, degraded, func(v float64) bool { return v == 1 })
	}
	eventuallyPicks(t, b, "B degraded to its local ledger", 20, bothUsed)
	a.picks(t, 10)

	// Redis comes back empty on the same port: both rejoin, A republishes, B is steered again.
	srv = redistest.Start(t, port)
	for _, e := range []*eppProc{a, b} {
		e.eventuallyMetric(t, degraded, func(v float64) bool { return v == 0 })
		e.eventuallyMetric(t, fallbacks, func(v float64) bool { return v >= 1 })
	}
	load.finish(t)
	eventuallyPicks(t, b, "B steered again after Redis restarted", 20, onlyOther)

	// A's long request ends: its charge is withdrawn and B spreads again.
	releaseLong()
	eventuallyPicks(t, b, "B spreads after A's release", 20, bothUsed)
	_ = srv

	// Every ledger gauge of both replicas returns to zero; both saw Redis fail and recover.
	for _, e := range []*eppProc{a, b} {
		deadline := time.Now().Add(10 * time.Second)
		for {
			m := e.scrape(t)
			nonZero := ""
			for k, v := range m {
				if (strings.HasPrefix(k, "pdgate_token_load_active_tokens{") || strings.HasPrefix(k, "pdgate_token_load_kv_tokens{") ||
					strings.HasPrefix(k, "pdgate_token_load_decode_tokens{") || strings.HasPrefix(k, "pdgate_token_load_decode_slots{")) && v != 0 {
					nonZero = fmt.Sprintf("%s=%v", k, v)
				}
			}
			if nonZero == "" {
				if m[`pdgate_token_load_shared_syncs_total{result="error"}`] == 0 || m[`pdgate_token_load_shared_syncs_total{result="ok"}`] == 0 {
					t.Fatalf("%s: want both ok and error Redis syncs counted, got %v", e.name, m)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: ledger gauge not back to zero: %s", e.name, nonZero)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// scrape reads the EPP's pdgate_token_load_* samples ("name{labels}" -> value).
func (e *eppProc) scrape(t *testing.T) map[string]float64 {
	t.Helper()
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(e.metrics)
	if err != nil {
		t.Fatalf("%s: scrape: %v", e.name, err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "pdgate_token_load_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("%s: bad sample %q", e.name, line)
		}
		out[line[:i]] = v
	}
	return out
}
