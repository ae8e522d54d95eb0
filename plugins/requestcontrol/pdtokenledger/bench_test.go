package pdtokenledger

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

type benchPod struct {
	key        tokenload.PodKey
	running    float64
	throughput float64
}

func benchPods(n int, role string) []benchPod {
	pods := make([]benchPod, n)
	for i := range pods {
		pods[i] = benchPod{key: tokenload.PodKey(fmt.Sprintf("ns/%s-%d", role, i)), running: float64(i % 7), throughput: float64(100 + i%13)}
	}
	return pods
}

// baselineCycle is a scheduling cycle without the ledger: score every prefill and decode
// candidate from per-pod scraped metrics looked up by pod key (what a least-request /
// load-balancing scorer reads) and pick the minimum.
func baselineCycle(prefill, decode []benchPod, metrics map[tokenload.PodKey]benchPod) (tokenload.PodKey, tokenload.PodKey) {
	bestP, bestD := tokenload.PodKey(""), tokenload.PodKey("")
	minP, minD := math.Inf(1), math.Inf(1)
	for _, p := range prefill {
		if s := metrics[p.key].running; s < minP {
			minP, bestP = s, p.key
		}
	}
	for _, d := range decode {
		m := metrics[d.key]
		if s := m.running/8 + (1 - m.throughput/112); s < minD {
			minD, bestD = s, d.key
		}
	}
	return bestP, bestD
}

// ledgerCycle is the same cycle scored from the ledger (token_load for both sides) with the
// pick charged in the same critical section; the oldest in-flight request is released so the
// ledger stays at a steady 64 open requests.
func ledgerCycle(tr *Tracker, prefill, decode []benchPod, rate tokenload.DecodeRate, i int, ids []string) {
	id := ids[i%len(ids)]
	tr.ReleaseAll(id)
	tr.Atomically(func(tx tokenload.Tx) {
		bestP, bestD := tokenload.PodKey(""), tokenload.PodKey("")
		minP, minD := math.Inf(1), math.Inf(1)
		for _, p := range prefill {
			if s := tx.Prefill(p.key).Priority(0.3); s < minP {
				minP, bestP = s, p.key
			}
		}
		for _, d := range decode {
			if s := tx.Decode(d.key, rate); s < minD {
				minD, bestD = s, d.key
			}
		}
		tx.ChargePrefill(tokenload.PrefillCharge{RequestID: id, Pod: bestP, Tokens: 4500, TTL: time.Hour})
		tx.ChargeDecode(tokenload.DecodeCharge{RequestID: id, Pod: bestD, Tokens: 1000, TTL: time.Hour})
	})
}

// BenchmarkSchedulingCycle reports the ledger's cost per scheduling cycle at 8, 64 and 512 pods
// per role, as a ratio against a no-ledger cycle measured in the same run ("x-baseline"), for
// the local ledger and with the shared-ledger cache active.
func BenchmarkSchedulingCycle(b *testing.B) {
	for _, n := range []int{8, 64, 512} {
		prefill, decode := benchPods(n, "prefill"), benchPods(n, "decode")
		rates := make(map[tokenload.PodKey]float64, n)
		for i, d := range decode {
			if i%4 != 0 {
				rates[d.key] = d.throughput / (d.running + 1)
			}
		}
		rate := func(p tokenload.PodKey) (float64, bool) { v, ok := rates[p]; return v, ok }
		metrics := make(map[tokenload.PodKey]benchPod, 2*n)
		for _, p := range append(append([]benchPod{}, prefill...), decode...) {
			metrics[p.key] = p
		}
		ids := make([]string, 64)
		for i := range ids {
			ids[i] = fmt.Sprintf("req-%d", i)
		}
		for _, shared := range []bool{false, true} {
			name := fmt.Sprintf("pods=%d/local", n)
			if shared {
				name = fmt.Sprintf("pods=%d/shared-cache", n)
			}
			b.Run(name, func(b *testing.B) {
				tr, _, _ := newTestTracker(b, nil)
				tr.log = tr.log.V(10)
				if shared {
					tr.notify = func() {}
					for _, d := range decode {
						tr.remote[d.key] = remoteAgg{tokens: 5000, charges: 3, sumAt: 3 * 1.8e9}
					}
				}
				// Baseline and ledger cycles alternate in chunks so that both see the same
				// machine noise; the ratio is what to read. (testing.Benchmark cannot be nested
				// in a running benchmark: it deadlocks on the benchmark lock.)
				const chunk = 64
				var baseDur, ledgerDur time.Duration
				var sink tokenload.PodKey
				b.ReportAllocs()
				b.ResetTimer()
				for done := 0; done < b.N; done += chunk {
					n := min(chunk, b.N-done)
					t0 := time.Now()
					for i := 0; i < n; i++ {
						p, _ := baselineCycle(prefill, decode, metrics)
						sink = p
					}
					t1 := time.Now()
					for i := 0; i < n; i++ {
						ledgerCycle(tr, prefill, decode, rate, done+i, ids)
					}
					t2 := time.Now()
					baseDur += t1.Sub(t0)
					ledgerDur += t2.Sub(t1)
				}
				if sink == "" {
					b.Fatal("baseline picked nothing")
				}
				baseNs := float64(baseDur.Nanoseconds()) / float64(b.N)
				perOp := float64(ledgerDur.Nanoseconds()) / float64(b.N)
				b.ReportMetric(perOp, "ledger-ns/cycle")
				b.ReportMetric(perOp/baseNs, "x-baseline")
				b.ReportMetric(baseNs, "baseline-ns/cycle")
			})
		}
	}
}
