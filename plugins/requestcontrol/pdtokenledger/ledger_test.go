package pdtokenledger

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

func TestNewTokensRules(t *testing.T) {
	long := strings.Repeat("k", MaxSessionKeyBytes+1)
	exact := strings.Repeat("k", MaxSessionKeyBytes)
	type call struct {
		model, key    string
		prompt, match int
		advance       time.Duration
		want          int
	}
	cases := []struct {
		name       string
		sessionTTL int
		calls      []call
	}{
		{"whole prompt without session or match", 1800, []call{{"m", "", 1000, -1, 0, 1000}}},
		{"prefix share", 1800, []call{{"m", "", 1000, 30, 0, 700}}},
		{"prefix share capped at 100", 1800, []call{{"m", "", 1000, 150, 0, 0}}},
		{"prefix share integer division", 1800, []call{{"m", "", 7, 50, 0, 3}}},
		{"non-positive prompt", 1800, []call{{"m", "s", 0, -1, 0, 0}, {"m", "s", -5, 10, 0, 0}}},
		{"session delta", 1800, []call{{"m", "s", 1000, -1, 0, 1000}, {"m", "s", 1500, -1, 0, 500}}},
		{"session delta wins over match", 1800, []call{{"m", "s", 1000, 90, 0, 100}, {"m", "s", 1500, 90, 0, 500}}},
		{"equal prompt falls through", 1800, []call{{"m", "s", 1000, -1, 0, 1000}, {"m", "s", 1000, -1, 0, 1000}}},
		{"shorter prompt falls through and becomes baseline", 1800, []call{
			{"m", "s", 1000, -1, 0, 1000}, {"m", "s", 400, 50, 0, 200}, {"m", "s", 600, -1, 0, 200}}},
		{"sessions are per model", 1800, []call{{"a", "s", 1000, -1, 0, 1000}, {"b", "s", 1500, -1, 0, 1500}}},
		{"key of 256 bytes accepted", 1800, []call{{"m", exact, 100, -1, 0, 100}, {"m", exact, 150, -1, 0, 50}}},
		{"key over 256 bytes ignored", 1800, []call{{"m", long, 100, -1, 0, 100}, {"m", long, 150, -1, 0, 150}}},
		{"session TTL 0 disables sessions", 0, []call{{"m", "s", 100, -1, 0, 100}, {"m", "s", 150, -1, 0, 150}}},
		{"expired session falls through", 10, []call{{"m", "s", 100, -1, 0, 100}, {"m", "s", 150, -1, 11 * time.Second, 150}}},
		{"session within TTL", 10, []call{{"m", "s", 100, -1, 0, 100}, {"m", "s", 150, -1, 10 * time.Second, 50}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk, _ := newTestTracker(t, func(p *Params) { p.SessionTTLSeconds = tc.sessionTTL })
			for i, c := range tc.calls {
				clk.Advance(c.advance)
				if got := tr.NewTokens(c.model, c.key, c.prompt, c.match); got != c.want {
					t.Fatalf("call %d: NewTokens(%q, key, %d, %d) = %d, want %d", i, c.model, c.prompt, c.match, got, c.want)
				}
			}
		})
	}
}

func TestSessionTableNeverGrowsPastBound(t *testing.T) {
	tr, clk, m := newTestTracker(t, func(p *Params) { p.MaxSessions = 3; p.SessionTTLSeconds = 60 })
	for i := 0; i < 10; i++ {
		tr.NewTokens("m", "key-"+string(rune('a'+i)), 100, -1)
		if n := tr.Snapshot().Sessions; n > 3 {
			t.Fatalf("after %d sessions the table holds %d > 3", i+1, n)
		}
	}
	if got := testutil.ToFloat64(m.sessionsFull); got != 7 {
		t.Fatalf("session_table_full_total = %v, want 7", got)
	}
	// A key refused while full gets no delta: it was never recorded.
	if got := tr.NewTokens("m", "key-j", 200, -1); got != 200 {
		t.Fatalf("unrecorded key delta = %d, want 200", got)
	}
	// Known keys still work while full.
	if got := tr.NewTokens("m", "key-a", 150, -1); got != 50 {
		t.Fatalf("known key delta = %d, want 50", got)
	}
	clk.Advance(61 * time.Second)
	if r := tr.Sweep(); r.SessionsExpired != 3 {
		t.Fatalf("expired %d sessions, want 3", r.SessionsExpired)
	}
	tr.NewTokens("m", "key-new", 100, -1)
	if n := tr.Snapshot().Sessions; n != 1 {
		t.Fatalf("after expiry the table holds %d, want 1", n)
	}
}

func TestChargeAndReleaseOnce(t *testing.T) {
	const p, d = tokenload.PodKey("ns/prefill-0"), tokenload.PodKey("ns/decode-0")
	type step struct {
		op                 string // chargeP, chargeD, active, prefill, all
		id                 string
		tokens             float64
		wantActive, wantKV float64
		wantDecode         float64
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"full lifecycle", []step{
			{"chargeP", "r1", 100, 100, 100, 0},
			{"chargeD", "r1", 60, 100, 100, 60},
			{"active", "r1", 0, 0, 100, 60},
			{"all", "r1", 0, 0, 0, 0},
		}},
		{"release active twice", []step{
			{"chargeP", "r1", 100, 100, 100, 0},
			{"chargeP", "r2", 50, 150, 150, 0},
			{"active", "r1", 0, 50, 150, 0},
			{"active", "r1", 0, 50, 150, 0},
			{"all", "r1", 0, 50, 50, 0},
			{"all", "r1", 0, 50, 50, 0},
			{"all", "r2", 0, 0, 0, 0},
		}},
		{"prefill failed keeps decode", []step{
			{"chargeP", "r1", 100, 100, 100, 0},
			{"chargeD", "r1", 80, 100, 100, 80},
			{"prefill", "r1", 0, 0, 0, 80},
			{"prefill", "r1", 0, 0, 0, 80},
			{"all", "r1", 0, 0, 0, 0},
		}},
		{"unknown request is a no-op", []step{
			{"chargeP", "r1", 100, 100, 100, 0},
			{"all", "nope", 0, 100, 100, 0},
			{"active", "nope", 0, 100, 100, 0},
			{"all", "r1", 0, 0, 0, 0},
		}},
		{"recharge releases the earlier charge", []step{
			{"chargeP", "r1", 100, 100, 100, 0},
			{"chargeP", "r1", 30, 30, 30, 0},
			{"chargeD", "r1", 10, 30, 30, 10},
			{"chargeD", "r1", 20, 30, 30, 20},
			{"all", "r1", 0, 0, 0, 0},
		}},
		{"invalid tokens ignored", []step{
			{"chargeP", "r1", -5, 0, 0, 0},
			{"chargeP", "r2", math.NaN(), 0, 0, 0},
			{"chargeD", "r3", math.Inf(1), 0, 0, 0},
			{"all", "r1", 0, 0, 0, 0},
		}},
		{"release before charge then charge", []step{
			{"all", "r1", 0, 0, 0, 0},
			{"chargeP", "r1", 10, 10, 10, 0},
			{"all", "r1", 0, 0, 0, 0},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, _, _ := newTestTracker(t, func(p *Params) { p.DecodeOutputGrowth = false })
			for i, s := range tc.steps {
				switch s.op {
				case "chargeP":
					tr.Atomically(func(tx tokenload.Tx) {
						tx.ChargePrefill(tokenload.PrefillCharge{RequestID: s.id, Pod: p, Tokens: s.tokens})
					})
				case "chargeD":
					tr.Atomically(func(tx tokenload.Tx) {
						tx.ChargeDecode(tokenload.DecodeCharge{RequestID: s.id, Pod: d, Tokens: s.tokens})
					})
				case "active":
					tr.ReleasePrefillActive(s.id)
				case "prefill":
					tr.ReleasePrefill(s.id)
				case "all":
					tr.ReleaseAll(s.id)
				}
				got := prefillOf(tr, p)
				gotD := decodeOf(tr, d, nil)
				if got.ActiveTokens != s.wantActive || got.KVTokens != s.wantKV || gotD != s.wantDecode {
					t.Fatalf("step %d (%s %s): active=%v kv=%v decode=%v, want %v %v %v",
						i, s.op, s.id, got.ActiveTokens, got.KVTokens, gotD, s.wantActive, s.wantKV, s.wantDecode)
				}
				if got.ActiveTokens < 0 || got.KVTokens < 0 || gotD < 0 {
					t.Fatalf("step %d: negative counter", i)
				}
			}
			if n := tr.Snapshot().OpenRequests; n != 0 {
				t.Fatalf("%d requests still open", n)
			}
		})
	}
}

func TestPriority(t *testing.T) {
	if got := (tokenload.PrefillLoad{ActiveTokens: 100, KVTokens: 1000}).Priority(0.3); got != 400 {
		t.Fatalf("priority = %v, want 400", got)
	}
}

func TestDecodeGrowth(t *testing.T) {
	const a, b, c = tokenload.PodKey("ns/a"), tokenload.PodKey("ns/b"), tokenload.PodKey("ns/c")
	rates := map[tokenload.PodKey]float64{a: 10, b: 30}
	rate := func(p tokenload.PodKey) (float64, bool) { v, ok := rates[p]; return v, ok }
	cases := []struct {
		name   string
		growth bool
		pod    tokenload.PodKey
		rate   tokenload.DecodeRate
		want   float64
	}{
		{"measured rate", true, a, rate, 100 + 10*2 + 50 + 10*1},
		{"mean of measured pods for a pod without metrics", true, c, rate, 40 + 20*1},
		{"no measured pod: no growth", true, c, func(tokenload.PodKey) (float64, bool) { return 0, false }, 40},
		{"nil rate: no growth", true, a, nil, 150},
		{"growth disabled", false, a, rate, 150},
		{"NaN rate treated as missing", true, c, func(tokenload.PodKey) (float64, bool) { return math.NaN(), true }, 40},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tr, clk, _ := newTestTracker(t, func(p *Params) { p.DecodeOutputGrowth = tc.growth })
			tr.Atomically(func(tx tokenload.Tx) { tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r1", Pod: a, Tokens: 100}) })
			clk.Advance(time.Second)
			tr.Atomically(func(tx tokenload.Tx) {
				tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r2", Pod: a, Tokens: 50})
				tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r3", Pod: c, Tokens: 40})
			})
			clk.Advance(time.Second)
			// Measure a and b first so their rates feed the mean.
			tr.Atomically(func(tx tokenload.Tx) { tx.Decode(a, tc.rate); tx.Decode(b, tc.rate) })
			if got := decodeOf(tr, tc.pod, tc.rate); math.Abs(got-tc.want) > 1e-9 {
				t.Fatalf("Decode(%s) = %v, want %v", tc.pod, got, tc.want)
			}
		})
	}
}

// decodeRequestCost counts every open decode charge on top of its tokens, and goes away with it.
func TestDecodeRequestCost(t *testing.T) {
	const a, b = tokenload.PodKey("ns/a"), tokenload.PodKey("ns/b")
	tr, _, _ := newTestTracker(t, func(p *Params) { p.DecodeOutputGrowth = false; p.DecodeRequestCost = 1000 })
	tr.Atomically(func(tx tokenload.Tx) {
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r1", Pod: a, Tokens: 100})
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r2", Pod: a, Tokens: 50})
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: "r3", Pod: b, Tokens: 400})
	})
	// Two short requests on a weigh more than one longer request on b.
	if got := decodeOf(tr, a, nil); got != 150+2*1000 {
		t.Fatalf("Decode(a) = %v, want 2150", got)
	}
	if got := decodeOf(tr, b, nil); got != 400+1000 {
		t.Fatalf("Decode(b) = %v, want 1400", got)
	}
	tr.ReleaseAll("r1")
	if got := decodeOf(tr, a, nil); got != 50+1000 {
		t.Fatalf("Decode(a) after releasing r1 = %v, want 1050", got)
	}
	tr.ReleaseAll("r2")
	if got := decodeOf(tr, a, nil); got != 0 {
		t.Fatalf("Decode(a) with no open charge = %v, want 0", got)
	}
}

// NewTokens is called by scorers inside Atomically (aibrix-pd-pair does): it must not take the ledger lock.
func TestNewTokensInsideAtomically(t *testing.T) {
	tr, _, _ := newTestTracker(t, nil)
	done := make(chan int, 1)
	go tr.Atomically(func(tx tokenload.Tx) { done <- tr.NewTokens("m", "s", 100, -1) })
	select {
	case n := <-done:
		if n != 100 {
			t.Fatalf("NewTokens = %d", n)
		}
	case <-time.After(30 * time.Second): // deadlock guard only, not a performance threshold
		t.Fatal("NewTokens inside Atomically deadlocked")
	}
}
