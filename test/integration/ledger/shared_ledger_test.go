// Package ledger tests the token-load ledger's Redis-shared decode ledger against a real
// redis-server: two ledger instances ("EPP replicas") share decode charges, degrade to their
// local ledgers when Redis dies and resume sharing when it comes back.
package ledger

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/redis/go-redis/v9"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/requestcontrol/pdtokenledger"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/redistest"
)

const (
	podA = tokenload.PodKey("default/decode-0")
	podB = tokenload.PodKey("default/decode-1")
)

var decodePods = []tokenload.PodKey{podA, podB}

func newReplica(t *testing.T, ctx context.Context, addr, id string) *pdtokenledger.Tracker {
	t.Helper()
	raw := fmt.Sprintf(`{"redis":{"address":%q,"replicaID":%q,"syncIntervalMs":100,"livenessTTLSeconds":2,"timeoutMs":50}}`, addr, id)
	p, err := pdtokenledger.ParseParams(id, []byte(raw), func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	m, err := pdtokenledger.NewMetrics(nil)
	if err != nil {
		t.Fatal(err)
	}
	tr := pdtokenledger.NewTracker(pdtokenledger.Options{Params: p, Metrics: m, Logger: testr.New(t).WithName(id)})
	tr.Start(ctx)
	return tr
}

// pick is a token_load decode pick: the pod with the fewest decode tokens (first wins ties),
// charged in the same critical section.
func pick(tr *pdtokenledger.Tracker, requestID string, promptTokens float64) (tokenload.PodKey, map[tokenload.PodKey]float64) {
	var best tokenload.PodKey
	scores := map[tokenload.PodKey]float64{}
	tr.Atomically(func(tx tokenload.Tx) {
		for _, p := range decodePods {
			scores[p] = tx.Decode(p, nil)
			if best == "" || scores[p] < scores[best] {
				best = p
			}
		}
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: requestID, Pod: best, Tokens: promptTokens, TTL: time.Hour})
	})
	return best, scores
}

func decodeScore(tr *pdtokenledger.Tracker, p tokenload.PodKey) (v float64) {
	tr.Atomically(func(tx tokenload.Tx) { v = tx.Decode(p, nil) })
	return v
}

// syncWait bounds waits for replicas' sync loops: a loaded machine may stall one for seconds;
// the condition, not the clock, decides.
const syncWait = 30 * time.Second

func TestSharedDecodeLedgerAcrossReplicas(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	port := testsupport.FreePort(t)
	srv := redistest.Start(t, port)
	a := newReplica(t, ctx, srv.Addr, "replica-a")
	b := newReplica(t, ctx, srv.Addr, "replica-b")
	// B reads the pods it scores: make both decode pods interesting to B before A charges.
	for _, p := range decodePods {
		decodeScore(b, p)
	}

	// 1. A long prompt charged through A steers B's next decode pick away from that pod.
	if got, _ := pick(a, "long", 50000); got != podA {
		t.Fatalf("A picked %s on an empty ledger, want %s (first wins ties)", got, podA)
	}
	testsupport.Eventually(t, syncWait, "B sees A's 50000 tokens on decode-0", func() bool { return decodeScore(b, podA) == 50000 })
	// A's output budget for it (recorded once scheduled) reaches B's leases, which an admission
	// forecast reads.
	a.RecordOutputBudget("long", 2000)
	testsupport.Eventually(t, syncWait, "B's leases carry A's output budget on decode-0", func() bool {
		got := make([]tokenload.Leases, 1)
		b.Leases([]tokenload.PodKey{podA}, got, "")
		return got[0] == tokenload.Leases{DecodeSlots: 1, DecodeTokens: 50000, DecodeBudgeted: 1, DecodeOutputTokens: 2000}
	})
	// A's prefill work queued on a prefill pod reaches B's leases too (not its prefill scores),
	// and leaves with the prefill leg.
	const prefillPod = tokenload.PodKey("default/prefill-0")
	a.Atomically(func(tx tokenload.Tx) {
		tx.ChargePrefill(tokenload.PrefillCharge{RequestID: "queued", Pod: prefillPod, Tokens: 8160, TTL: time.Hour})
	})
	prefillLeases := func() tokenload.Leases {
		got := make([]tokenload.Leases, 1)
		b.Leases([]tokenload.PodKey{prefillPod}, got, "")
		return got[0]
	}
	testsupport.Eventually(t, syncWait, "B's leases carry A's queued prefill", func() bool {
		return prefillLeases() == tokenload.Leases{PrefillTokens: 8160, PrefillLegs: 1}
	})
	var ownScore tokenload.PrefillLoad
	b.Atomically(func(tx tokenload.Tx) { ownScore = tx.Prefill(prefillPod) })
	if ownScore != (tokenload.PrefillLoad{}) {
		t.Fatalf("B's prefill score %+v, want its local ledger only (empty)", ownScore)
	}
	a.ReleasePrefillActive("queued")
	testsupport.Eventually(t, syncWait, "B sees A's prefill leg end", func() bool { return prefillLeases() == tokenload.Leases{} })
	a.ReleaseAll("queued")
	got, scores := pick(b, "short-b1", 100)
	if got != podB {
		t.Fatalf("B picked %s with scores %v, want %s (steered by A's charge)", got, scores, podB)
	}
	// And B's charge is visible to A on top of A's own.
	testsupport.Eventually(t, syncWait, "A sees B's 100 tokens on decode-1", func() bool { return decodeScore(a, podB) == 100 })
	if v := decodeScore(a, podA); v != 50000 {
		t.Fatalf("A's own decode-0 score %v, want 50000 (own field must not be counted twice)", v)
	}

	// 2. Redis dies: both degrade to their local ledgers; scheduling and releases keep working.
	srv.Kill()
	for name, r := range map[string]*pdtokenledger.Tracker{"A": a, "B": b} {
		testsupport.Eventually(t, syncWait, name+" says it is degraded to its local ledger", func() bool { return r.Snapshot().SharedDegraded })
	}
	testsupport.Eventually(t, syncWait, "B drops A's remote share", func() bool { return decodeScore(b, podA) == 0 })
	testsupport.Eventually(t, syncWait, "A drops B's remote share", func() bool { return decodeScore(a, podB) == 0 })
	for i := 0; i < 50; i++ {
		id := fmt.Sprintf("down-%d", i)
		if _, s := pick(b, id, 10); s == nil {
			t.Fatal("no scores")
		}
		b.ReleaseAll(id)
	}
	if got, _ := pick(b, "while-down", 10); got != podA {
		t.Fatalf("B with only its local ledger (decode-1 holds its own 100) picked %s, want %s", got, podA)
	}
	b.ReleaseAll("while-down")

	// 3. Redis comes back (empty) on the same port: each replica republishes, sharing resumes.
	srv = redistest.Start(t, port)
	for name, r := range map[string]*pdtokenledger.Tracker{"A": a, "B": b} {
		testsupport.Eventually(t, syncWait, name+" rejoins the shared ledger", func() bool { return !r.Snapshot().SharedDegraded })
	}
	testsupport.Eventually(t, syncWait, "B sees A's charge again", func() bool { return decodeScore(b, podA) == 50000 })
	testsupport.Eventually(t, syncWait, "A sees B's charge again", func() bool { return decodeScore(a, podB) == 100 })

	// 4. Releases propagate: the field is deleted and the remote share disappears.
	a.ReleaseAll("long")
	testsupport.Eventually(t, syncWait, "B sees A's release", func() bool { return decodeScore(b, podA) == 0 })
	b.ReleaseAll("short-b1")
	testsupport.Eventually(t, syncWait, "A sees B's release", func() bool { return decodeScore(a, podB) == 0 })
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	testsupport.Eventually(t, syncWait, "no fields left for decode-0", func() bool {
		n, err := rc.HLen(context.Background(), "pdgate:dtl:"+string(podA)).Result()
		return err == nil && n == 0
	})
}

func TestDeadReplicaEntriesExpire(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv := redistest.Start(t, testsupport.FreePort(t))
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, Protocol: 2, DisableIdentity: true})
	defer rc.Close()
	b := newReplica(t, ctx, srv.Addr, "replica-b")
	decodeScore(b, podA)

	// A live replica "c" (heartbeat now) and a dead one "d" (heartbeat 1 min ago, crashed
	// without withdrawing its fields).
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	nowMS := float64(now.UnixMilli())
	key := "pdgate:dtl:" + string(podA)
	sumAt := float64(now.Unix())
	if err := rc.ZAdd(ctx, "pdgate:dtl:replicas", redis.Z{Score: nowMS, Member: "c"}, redis.Z{Score: nowMS - 60000, Member: "d"}).Err(); err != nil {
		t.Fatal(err)
	}
	if err := rc.HSet(ctx, key, "c", pdtokenledger.FormatSharedValue(700, 1, sumAt), "d", pdtokenledger.FormatSharedValue(9000, 1, sumAt)).Err(); err != nil {
		t.Fatal(err)
	}
	testsupport.Eventually(t, syncWait, "B counts only the live replica", func() bool { return decodeScore(b, podA) == 700 })
	testsupport.Eventually(t, syncWait, "the dead replica's field is pruned", func() bool {
		ok, err := rc.HExists(ctx, key, "d").Result()
		return err == nil && !ok
	})
	// c stops heartbeating: after the liveness TTL (2 s) it no longer counts.
	testsupport.Eventually(t, syncWait, "B drops the replica whose heartbeat expired", func() bool { return decodeScore(b, podA) == 0 })
}
