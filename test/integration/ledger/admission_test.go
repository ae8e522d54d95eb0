package ledger

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/eppclient"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

// bound is what limits a fleet's admissions in one scenario: the requests offered, the engines'
// KV cache and the TTFT objective.
type bound struct {
	promptChars, maxTokens int
	kvBlocks               int // the fake engines' KV cache, in 16-token blocks (10 % in use)
	ttft                   string
	fleet                  int // about what the fleet holds
}

var (
	// KV-bound: a ~50-token prompt with 700 tokens of output budget, 16,000 tokens of KV per
	// decode pod: each takes about 20 sequences (prompts and budgets reserved), the fleet 40.
	// The TTFT and TPOT forecasts stay far inside the objective at that load.
	kvBound = bound{promptChars: 200, maxTokens: 700, kvBlocks: 1000, ttft: "1s", fleet: 40}
	// Prefill-bound: ~4,000-token prompts held in the prefill queue (the fake engines never
	// answer, so no prefill leg ends): about 50 legs fit an 8 s TTFT (10 s with headroom 0.8) on
	// the one prefill pod, while the decode pods' 1.6M tokens of KV hold them all.
	prefillBound = bound{promptChars: 16000, maxTokens: 16, kvBlocks: 100000, ttft: "10s", fleet: 50}
)

func (b bound) body() string {
	raw, _ := json.Marshal(map[string]any{"model": "m", "prompt": strings.Repeat("abcd", b.promptChars/4), "max_tokens": b.maxTokens})
	return string(raw)
}

// startEngines serves each pod's vLLM metrics with kvBlocks of KV cache.
func startEngines(t *testing.T, kvBlocks int, names map[string]string) map[string]fakePod {
	return servePods(t, names, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		page := &strings.Builder{}
		testsupport.WriteVLLMMetrics(page, 0, 0)
		_, _ = io.WriteString(w, strings.Replace(page.String(), `num_gpu_blocks="1000"`, fmt.Sprintf(`num_gpu_blocks="%d"`, kvBlocks), 1))
	}))
}

func startAdmissionEPP(t *testing.T, name, redisAddr string, b bound, pods map[string]fakePod) *eppProc {
	// the fake engines' KV cache is in blocks of 16 tokens
	cfg := testsupport.LedgerAdmission{Redis: redisAddr, ReplicaID: name, TTFT: b.ttft, KVCapacityTokens: 16 * b.kvBlocks}
	return startEPPWith(t, name, cfg.Config(), "admission-it", pods)
}

// answer is one request's outcome: forwarded to a decode pod, or refused with a status and
// llm-d's drop reason. Anything else (a transport error, a forward with no pick, a refusal
// without a reason) is a lost request.
type answer struct {
	forwarded bool
	status    int
	reason    string
}

// offer sends one request and holds it in flight (the ledger keeps its leases) until release.
func (e *eppProc) offer(t *testing.T, holder *held, body string) answer {
	t.Helper()
	id := fmt.Sprintf("%s-%d", e.name, e.seq.Add(1))
	rt, _, closeFn, err := eppclient.Open(e.client, "/v1/completions", map[string]string{"x-request-id": id}, []byte(body), 5*time.Minute)
	holder.add(closeFn)
	if err != nil {
		t.Fatalf("%s: request %s lost: %v", e.name, id, err)
	}
	if rt.Immediate == nil {
		v, ok := rt.Header("x-gateway-destination-endpoint")
		if !ok || e.byAddr[v] == "" {
			t.Fatalf("%s: request %s forwarded with no decode pick", e.name, id)
		}
		return answer{forwarded: true}
	}
	a := answer{status: rt.Status()}
	for _, h := range rt.Immediate.GetHeaders().GetSetHeaders() {
		if strings.EqualFold(h.GetHeader().GetKey(), "x-llm-d-request-dropped-reason") {
			a.reason = extprocclient.HeaderValue(h.GetHeader())
		}
	}
	if a.reason == "" {
		t.Fatalf("%s: request %s answered %d without a drop reason: %s", e.name, id, a.status, rt.Immediate.GetBody())
	}
	return a
}

// held is the set of streams in flight; release ends them all (their leases are released).
type held struct{ closers []func() }

func (h *held) add(f func()) { h.closers = append(h.closers, f) }

func (h *held) release() {
	for _, c := range h.closers {
		c()
	}
	h.closers = nil
}

// sharedSlots is the decode charges of every replica in Redis over the decode pods.
func sharedSlots(t *testing.T, rc *redis.Client) int {
	t.Helper()
	n := 0
	for _, key := range []string{"pdgate:dtl:default/decode-0", "pdgate:dtl:default/decode-1"} {
		fields, err := rc.HGetAll(context.Background(), key).Result()
		if err != nil {
			t.Fatalf("redis: %v", err)
		}
		for _, v := range fields {
			if parts := strings.Split(v, ","); len(parts) == 3 {
				c, _ := strconv.Atoi(parts[1])
				n += c
			}
		}
	}
	return n
}

// synced waits until Redis holds admitted decode charges and then until e has synced twice more
// (its cache is refreshed after the publish): the condition, not the clock, decides when the
// next request may read the other replica's leases.
func (e *eppProc) synced(t *testing.T, rc *redis.Client, admitted int) {
	t.Helper()
	testsupport.Eventually(t, 30*time.Second, fmt.Sprintf("%d decode charges in Redis", admitted), func() bool { return sharedSlots(t, rc) == admitted })
	const ok = `pdgate_token_load_shared_syncs_total{result="ok"}`
	base := e.scrape(t)[ok]
	e.eventuallyMetric(t, ok, func(v float64) bool { return v >= base+2 })
}

// TestTwoEPPReplicasAdmitAsOne runs forecast admission on two real EPP processes sharing one
// ledger through a real redis-server, on a fleet whose decode KV cache binds (the shared decode
// leases) and on one whose prefill queue binds (the shared prefill leases). At twice the fleet's
// capacity, one EPP admits what the fleet holds; two EPPs taking turns admit within 10 % of it,
// because each forecasts on the other's leases. Killing Redis mid-run loses no request (each one
// is forwarded or refused with a reason), both replicas say they are degraded, and each falls
// back to its own leases.
func TestTwoEPPReplicasAdmitAsOne(t *testing.T) {
	for _, tc := range []struct {
		name string
		b    bound
	}{{"decode KV binds", kvBound}, {"prefill queue binds", prefillBound}} {
		t.Run(tc.name, func(t *testing.T) { admitAsOne(t, tc.b) })
	}
}

func admitAsOne(t *testing.T, b bound) {
	port := testsupport.FreePort(t)
	srv := redistest.Start(t, port)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	pods := startEngines(t, b.kvBlocks, map[string]string{"prefill-0": "prefill", "decode-0": "decode", "decode-1": "decode"})
	a := startAdmissionEPP(t, "epp-a", srv.Addr, b, pods)
	bb := startAdmissionEPP(t, "epp-b", srv.Addr, b, pods)
	body := b.body()
	for _, e := range []*eppProc{a, bb} {
		// admitted once the engines' KV capacity is scraped (the first scrape may lag the start)
		testsupport.Eventually(t, 30*time.Second, e.name+" admits", func() bool {
			var h held
			defer h.release()
			return e.offer(t, &h, body).forwarded
		})
	}
	testsupport.Eventually(t, 30*time.Second, "warm-up leases released", func() bool { return sharedSlots(t, rc) == 0 })
	offered := 2 * b.fleet

	// One EPP at twice the fleet's capacity.
	var one held
	admittedOne := 0
	for i := 0; i < offered; i++ {
		if r := a.offer(t, &one, body); r.forwarded {
			admittedOne++
		} else if r.status != 429 || r.reason != "rejected-saturated" {
			t.Fatalf("one EPP: refused with %d %q, want 429 rejected-saturated", r.status, r.reason)
		}
	}
	one.release()
	testsupport.Eventually(t, 30*time.Second, "one EPP's leases released", func() bool { return sharedSlots(t, rc) == 0 })
	if admittedOne < b.fleet/2 || admittedOne >= offered {
		t.Fatalf("one EPP admitted %d of %d: want the fleet's capacity (~%d), some refused", admittedOne, offered, b.fleet)
	}

	// Two EPPs taking turns on the same load, each reading the other's leases.
	var two held
	defer two.release()
	admittedTwo := 0
	for i := 0; i < offered; i++ {
		e, other := a, bb
		if i%2 == 1 {
			e, other = bb, a
		}
		if r := e.offer(t, &two, body); r.forwarded {
			admittedTwo++
			other.synced(t, rc, admittedTwo)
		}
	}
	t.Logf("admitted at %d offered: one EPP %d, two EPPs %d (%+.1f %%)", offered, admittedOne, admittedTwo,
		100*float64(admittedTwo-admittedOne)/float64(admittedOne))
	if d := admittedTwo - admittedOne; 10*d > admittedOne || -10*d > admittedOne {
		t.Fatalf("two EPPs admitted %d, one EPP %d: want within 10 %%", admittedTwo, admittedOne)
	}

	// Redis dies mid-run, the two replicas' leases still in flight: every further request is
	// answered, the replicas say they are degraded and admit on their own leases only.
	const degraded, fallbacks = "pdgate_token_load_shared_degraded", "pdgate_token_load_shared_fallbacks_total"
	srv.Kill()
	for _, e := range []*eppProc{a, bb} {
		e.eventuallyMetric(t, degraded, func(v float64) bool { return v == 1 })
		e.eventuallyMetric(t, fallbacks, func(v float64) bool { return v >= 1 })
	}
	admittedDegraded := 0
	for i := 0; i < offered; i++ {
		r := []*eppProc{a, bb}[i%2].offer(t, &two, body)
		if r.forwarded {
			admittedDegraded++
		} else if r.status != 429 {
			t.Fatalf("Redis down: refused with %d %q, want 429", r.status, r.reason)
		}
	}
	t.Logf("Redis killed: %d more requests all answered, %d of them admitted on local leases", offered, admittedDegraded)
	// each replica holds about half the fleet's leases and now sees only those
	if admittedDegraded == 0 {
		t.Fatalf("degraded replicas admitted nothing more: they still read leases from the dead Redis")
	}
}
