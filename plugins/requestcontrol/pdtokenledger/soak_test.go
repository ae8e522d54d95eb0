package pdtokenledger

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// TestSoak drives 20k requests through the plugin's lifecycle hooks from concurrent goroutines
// with random completions, prefill failures, disconnects, duplicate and late hooks, requests
// that are never scheduled, and a concurrent janitor; every counter must end at exactly zero
// and the session table within its bound.
func TestSoak(t *testing.T) {
	const (
		total       = 20000
		workers     = 8
		window      = 16
		maxSessions = 100
	)
	tr, clk, m := newTestTracker(t, func(p *Params) { p.MaxSessions = maxSessions; p.UnconfirmedTimeoutSeconds = 60 })
	pl := New("ledger", tr)
	ctx := context.Background()
	prefill := make([]tokenload.PodKey, 8)
	decode := make([]tokenload.PodKey, 8)
	for i := range prefill {
		prefill[i] = tokenload.PodKey(fmt.Sprintf("ns/prefill-%d", i))
		decode[i] = tokenload.PodKey(fmt.Sprintf("ns/decode-%d", i))
	}
	rate := func(p tokenload.PodKey) (float64, bool) { return float64(len(p)), len(p)%2 == 0 }

	stop := make(chan struct{})
	var janitor sync.WaitGroup
	janitor.Add(1)
	go func() {
		defer janitor.Done()
		for {
			select {
			case <-stop:
				return
			default:
				tr.Sweep() // the clock stands still: pruning races charging, TTLs never expire
				time.Sleep(time.Millisecond)
			}
		}
	}()

	var wg sync.WaitGroup
	var outcomes [5]int64
	var outMu sync.Mutex
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 42))
			var inflight []*fwksched.LLMRequest
			scheduled := map[string]bool{}
			finish := func(req *fwksched.LLMRequest) {
				kind := 4
				if scheduled[req.RequestId] {
					kind = rng.IntN(4)
				}
				delete(scheduled, req.RequestId)
				outMu.Lock()
				outcomes[kind]++
				outMu.Unlock()
				eos := &fwkrc.Response{RequestId: req.RequestId, EndOfStream: true}
				switch kind {
				case 0: // completion
					pl.ResponseHeader(ctx, req, &fwkrc.Response{Headers: map[string]string{protocol.HeaderPrefillOutcome: protocol.PrefillOK}}, nil)
					pl.ResponseBody(ctx, req, &fwkrc.Response{RequestId: req.RequestId}, nil)
					pl.ResponseBody(ctx, req, eos, nil)
				case 1: // prefill failure, then the error response ends
					pl.ResponseHeader(ctx, req, &fwkrc.Response{Headers: map[string]string{protocol.HeaderPrefillOutcome: protocol.PrefillFailed}}, nil)
					pl.ResponseBody(ctx, req, eos, nil)
				case 2: // client disconnect before headers: GIE's forced final call only
					pl.ResponseBody(ctx, req, eos, nil)
				case 3: // duplicate and late hooks
					pl.ResponseBody(ctx, req, eos, nil)
					pl.ResponseBody(ctx, req, eos, nil)
					pl.ResponseHeader(ctx, req, &fwkrc.Response{}, nil)
				case 4: // scheduling failed after the charge: no hook ever runs (unconfirmed sweep)
				}
			}
			for i := 0; i < total/workers; i++ {
				req := &fwksched.LLMRequest{RequestId: fmt.Sprintf("w%d-r%d", w, i), TargetModel: "m"}
				prompt := 1 + rng.IntN(8000)
				newTokens := tr.NewTokens("m", fmt.Sprintf("s%d", rng.IntN(500)), prompt, rng.IntN(101)-1)
				tr.Atomically(func(tx tokenload.Tx) {
					bestP, bestD := prefill[0], decode[0]
					for j := range prefill {
						if tx.Prefill(prefill[j]).Priority(0.3) < tx.Prefill(bestP).Priority(0.3) {
							bestP = prefill[j]
						}
						if tx.Decode(decode[j], rate) < tx.Decode(bestD, rate) {
							bestD = decode[j]
						}
					}
					tx.ChargePrefill(tokenload.PrefillCharge{RequestID: req.RequestId, Pod: bestP, Tokens: 3500 + float64(newTokens), TTL: time.Hour})
					tx.ChargeDecode(tokenload.DecodeCharge{RequestID: req.RequestId, Pod: bestD, Tokens: float64(prompt), TTL: time.Hour})
				})
				if rng.IntN(10) != 0 {
					pl.PreRequest(ctx, req, nil)
					scheduled[req.RequestId] = true
				}
				inflight = append(inflight, req)
				if len(inflight) >= window {
					k := rng.IntN(len(inflight))
					finish(inflight[k])
					inflight = append(inflight[:k], inflight[k+1:]...)
				}
			}
			for _, req := range inflight {
				finish(req)
			}
		}(w)
	}
	wg.Wait()
	close(stop)
	janitor.Wait()

	sessionsAtEnd := tr.Snapshot().Sessions
	if sessionsAtEnd > maxSessions || sessionsAtEnd == 0 {
		t.Fatalf("session table holds %d, want 1..%d (500 distinct keys were offered)", sessionsAtEnd, maxSessions)
	}
	if full := testutil.ToFloat64(m.sessionsFull); full == 0 {
		t.Fatal("the session table never reported full with 500 keys for 100 slots")
	}
	// Unscheduled requests are released by the unconfirmed sweep; the TTL sweep catches the rest.
	clk.Advance(2 * time.Hour)
	tr.Sweep()
	s := tr.Snapshot()
	if s.OpenRequests != 0 {
		t.Fatalf("%d requests still open", s.OpenRequests)
	}
	for k, ps := range s.Pods {
		if ps != (PodSnapshot{}) {
			t.Fatalf("pod %s not back to zero: %+v", k, ps)
		}
	}
	if s.Sessions > maxSessions {
		t.Fatalf("session table %d > bound %d", s.Sessions, maxSessions)
	}
	for _, p := range append(prefill, decode...) {
		ns, name := splitPod(p)
		for _, g := range []float64{testutil.ToFloat64(m.active.WithLabelValues(ns, name)), testutil.ToFloat64(m.kv.WithLabelValues(ns, name)),
			testutil.ToFloat64(m.decode.WithLabelValues(ns, name))} {
			if g != 0 {
				t.Fatalf("gauge for %s = %v, want 0", p, g)
			}
		}
	}
	if got := testutil.ToFloat64(m.forceReleased.WithLabelValues("prefill", "ttl")); got != 0 {
		t.Fatalf("TTL sweep force-released %v prefill charges; every scheduled request should have been released by its hooks", got)
	}
	t.Logf("outcomes completion/prefill-failure/disconnect/duplicate/unscheduled = %v; sessions at end=%d (bound %d); unconfirmed released=%v",
		outcomes, sessionsAtEnd, maxSessions, testutil.ToFloat64(m.forceReleased.WithLabelValues("prefill", "unconfirmed")))
}
