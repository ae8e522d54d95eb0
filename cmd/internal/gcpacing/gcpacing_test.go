package gcpacing

import (
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
)

func TestPercentFor(t *testing.T) {
	const mib = 1 << 20
	for _, tc := range []struct {
		name                   string
		live, scanned, minHeap uint64
		want                   int
	}{
		{"nothing scanned yet: the runtime's minimum scaled to the floor", 0, 0, 64 * mib, 1600},
		{"9 MiB live, 13 MiB scanned, 64 MiB floor", 9 * mib, 13 * mib, 64 * mib, 424},
		{"stacks and globals count: 9 MiB live alone", 9 * mib, 9 * mib, 64 * mib, 612},
		{"a tiny heap: the same", 100, 100, 64 * mib, 1600},
		{"a floor below the runtime's minimum changes nothing", 1 * mib, 2 * mib, 3 * mib, basePercent},
		{"GOGC=100 reaches the floor", 30 * mib, 34 * mib, 64 * mib, basePercent},
		{"a large heap keeps GOGC=100", 300 * mib, 304 * mib, 64 * mib, basePercent},
		{"just under: a little above 100", 31 * mib, 31 * mib, 64 * mib, 107},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := percentFor(tc.live, tc.scanned, tc.minHeap)
			if got != tc.want {
				t.Fatalf("percentFor(%d, %d, %d) = %d, want %d", tc.live, tc.scanned, tc.minHeap, got, tc.want)
			}
			{
				target := max(tc.live+tc.scanned*uint64(got)/100, runtimeHeapMinimum*uint64(got)/100)
				if target < tc.minHeap {
					t.Fatalf("target %d below the floor %d", target, tc.minHeap)
				}
			}
		})
	}
}

func TestStartLeavesAChosenPacingAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
	}{
		{"GOGC set", Options{MinHeap: DefaultMinHeap, Getenv: func(k string) string { return map[string]string{"GOGC": "200"}[k] }}},
		{"no floor", Options{MinHeap: 0, Getenv: func(string) string { return "" }}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if p := Start(tc.o); p != nil {
				p.Stop()
				t.Fatal("Start paced the collector")
			}
		})
	}
}

func heapGoal() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/goal:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

// sink makes churn's objects escape to the heap.
var sink []byte

// churn allocates n bytes of short-lived garbage in 1 KiB objects and returns the collections
// that ran meanwhile.
func churn(n int) uint32 {
	var st runtime.MemStats
	runtime.ReadMemStats(&st)
	before := st.NumGC
	for range n / 1024 {
		sink = make([]byte, 1024)
	}
	runtime.ReadMemStats(&st)
	sink = nil
	return st.NumGC - before
}

// With a floor of 64 MiB over a heap of a few MiB, 512 MiB of garbage starts a collection every
// 64 MiB or so (a cycle starts somewhat before its target), where GOGC=100 starts one every few
// MiB: 25 to 150 here, depending on how fast the mark workers keep up on a busy machine.
func TestPacerCollectsLessOften(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(basePercent))
	runtime.GC()
	if goal := heapGoal(); goal >= DefaultMinHeap {
		t.Fatalf("heap goal %d MiB before pacing: the test needs a small heap", goal>>20)
	}
	const garbage = 512 << 20
	base := churn(garbage)

	p := Start(Options{MinHeap: DefaultMinHeap, Getenv: func(string) string { return "" }})
	if p == nil {
		t.Fatal("Start did not pace")
	}
	defer p.Stop()
	if goal := heapGoal(); goal < DefaultMinHeap {
		t.Fatalf("heap goal %d MiB after Start on a small heap, want at least %d", goal>>20, DefaultMinHeap>>20)
	}
	runtime.GC() // the pacer adjusts after a collection, from the heap it left
	paced := churn(garbage)
	const most = garbage / (DefaultMinHeap / 2)
	if paced > most {
		t.Fatalf("%d collections paced (%d at GOGC=100), want at most %d", paced, base, most)
	}
	// The percent the last cycle left varies: garbage allocated while a cycle marks counts as
	// live for that cycle, and the churn allocates fast.
	t.Logf("512 MiB of garbage: %d collections at GOGC=100, %d paced (percent %d after the last)", base, paced, p.Percent())

	p.Stop()
	if got := debug.SetGCPercent(basePercent); got != basePercent {
		t.Fatalf("Stop left the percent at %d", got)
	}
}
