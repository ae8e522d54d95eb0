// Package gcpacing gives a request-path server's garbage collector a minimum heap: the next
// collection is not started before the heap has grown to MinHeap, however little of it is live.
//
// The EPP's live heap is small (about 9 MiB at 16 endpoints with warm prefix indexes) and each
// request allocates some 30 KiB of short-lived objects. Go's default pacing (GOGC=100) starts a
// collection once the heap has grown by its live size, so the EPP collected every ~250
// requests, and a cycle's fixed costs (waking the mark workers, scanning every goroutine's
// stack, the two stop-the-world phases, sweeping) made collection and the scheduler work it
// brings a third of the instructions of a 1 KB request. A floor on the heap target amortises a
// cycle over thousands of requests for a few tens of MiB of memory. A large live heap (a busy
// fleet's prefix index and sessions, 100 MiB and more) is paced as GOGC=100 paces it: the floor
// only ever raises the target, and only while GOGC=100's is below it.
//
// This is the "minimum heap" Go's runtime does not offer: after each collection the pacer reads
// the live heap and the goroutine stacks and globals the collector scans (runtime/metrics) and
// sets the GC percent (debug.SetGCPercent) so that the next target, which Go computes as
// live + (live + stacks + globals) × percent / 100, is at least MinHeap. A memory limit (GOMEMLIMIT, which the chart sets to 90 % of
// the container's) still bounds the heap: the runtime collects earlier whenever the limit is
// near, whatever the percent. An operator who sets GOGC has chosen a pacing; Start then leaves
// it alone.
package gcpacing

import (
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// DefaultMinHeap is the heap a collection waits for: 64 MiB, about 2,000 requests of garbage on
// the EPP's request path, and a quarter of the 256 MiB its memory goal allows.
const DefaultMinHeap = 64 << 20

// basePercent is Go's default GOGC: the pacing above the floor.
const basePercent = 100

// runtimeHeapMinimum is the Go runtime's minimum heap target at GOGC=100, which it scales with
// the percent (4 MiB × percent / 100). Above MinHeap × 100 / 4 MiB that minimum alone would put
// the target past MinHeap, so the percent is capped there: on an almost empty heap (a process
// just started) the target is then MinHeap exactly.
const runtimeHeapMinimum = 4 << 20

// Options configure Start.
type Options struct {
	// MinHeap is the heap size in bytes below which no collection starts; 0 turns pacing off.
	MinHeap uint64
	// Getenv reads the environment (os.Getenv when nil): a GOGC set there turns pacing off.
	Getenv func(string) string
}

// Pacer adjusts the GC percent after each collection until Stop.
type Pacer struct {
	minHeap uint64
	stopped atomic.Bool
	percent atomic.Int64
	sample  []metrics.Sample
}

// Start installs the pacer and sets the percent for the heap as it is now. It returns nil, and
// changes nothing, when MinHeap is 0 or GOGC is set in the environment.
func Start(o Options) *Pacer {
	getenv := o.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	if o.MinHeap == 0 || getenv("GOGC") != "" {
		return nil
	}
	p := &Pacer{minHeap: o.MinHeap, sample: []metrics.Sample{
		{Name: "/gc/heap/live:bytes"}, {Name: "/gc/scan/stack:bytes"}, {Name: "/gc/scan/globals:bytes"}}}
	p.percent.Store(basePercent)
	p.adjust()
	p.arm()
	return p
}

// Stop ends the pacing and restores Go's default percent. A nil Pacer's Stop does nothing.
func (p *Pacer) Stop() {
	if p == nil || p.stopped.Swap(true) {
		return
	}
	debug.SetGCPercent(basePercent)
}

// Percent is the GC percent the pacer set last.
func (p *Pacer) Percent() int { return int(p.percent.Load()) }

// sentinel is garbage whose finalizer runs once per collection: it holds a pointer so that it
// is never one of the tiny allocator's batched blocks, which are freed (and finalized) together.
type sentinel struct {
	_ *byte
	_ [8]byte
}

// arm allocates a sentinel whose finalizer, run after the next collection has found it
// unreachable, adjusts the percent and arms the next one.
func (p *Pacer) arm() {
	runtime.SetFinalizer(&sentinel{}, func(*sentinel) {
		if p.stopped.Load() {
			return
		}
		p.adjust()
		p.arm()
	})
}

// adjust sets the percent for the live heap the last collection left.
func (p *Pacer) adjust() {
	metrics.Read(p.sample)
	var v [3]uint64
	for i, s := range p.sample {
		if s.Value.Kind() != metrics.KindUint64 {
			return // a runtime without these metrics: leave the percent as it is
		}
		v[i] = s.Value.Uint64()
	}
	want := int64(percentFor(v[0], v[0]+v[1]+v[2], p.minHeap))
	if p.percent.Swap(want) != want && !p.stopped.Load() {
		debug.SetGCPercent(int(want))
	}
}

// percentFor is the GC percent whose target, the larger of live + scanned × percent / 100
// (scanned: the live heap, stacks and globals) and the runtime's scaled minimum, is MinHeap, or
// GOGC=100's target where that is larger.
func percentFor(live, scanned, minHeap uint64) int {
	ceiling := max(minHeap*100/runtimeHeapMinimum, basePercent)
	if scanned == 0 {
		return int(ceiling)
	}
	if live+scanned >= minHeap {
		return basePercent
	}
	pct := (minHeap-live)*100/scanned + 1 // rounded up: the target never falls short
	return int(min(pct, ceiling))
}
