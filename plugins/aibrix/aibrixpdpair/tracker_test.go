package aibrixpdpair

import (
	"testing"
	"time"
)

// TestTrackerLocalTokens: a decode pod's local prefill tokens count until the request's
// response headers (or its end, or the TTL sweep) release them, once.
func TestTrackerLocalTokens(t *testing.T) {
	for _, tc := range []struct {
		name    string
		release func(tr *Tracker, advance func(time.Duration))
		want    float64 // left on d after the release
	}{
		{"response headers release them", func(tr *Tracker, _ func(time.Duration)) { tr.Started("r1") }, 2000},
		{"the end of the request releases them", func(tr *Tracker, _ func(time.Duration)) { tr.Done("r1") }, 2000},
		{"a second release is a no-op", func(tr *Tracker, _ func(time.Duration)) { tr.Started("r1"); tr.Done("r1") }, 2000},
		{"a new pick of the same request replaces them", func(tr *Tracker, _ func(time.Duration)) { tr.Register("r1", "p", "d") }, 2000},
		{"a remote pick of another request adds nothing", func(tr *Tracker, _ func(time.Duration)) { tr.Register("r3", "p", "d") }, 6000},
		{"the TTL sweep releases what never answered", func(tr *Tracker, advance func(time.Duration)) {
			advance(2 * time.Minute)
			tr.Register("r3", "p", "d")
		}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			now := time.Unix(1000, 0)
			tr := NewTracker(time.Minute, func() time.Time { return now })
			tr.RegisterLocal("r1", "d", 4000)
			tr.RegisterLocal("r2", "d", 2000)
			tr.RegisterLocal("r0", "d", 0) // nothing to prefill: nothing counted
			if got := tr.LocalTokens("d"); got != 6000 {
				t.Fatalf("local tokens %g, want 6000", got)
			}
			if got := tr.PendingDecode("d"); got != 3 {
				t.Fatalf("pending decode %g, want 3", got)
			}
			tc.release(tr, func(d time.Duration) { now = now.Add(d) })
			if got := tr.LocalTokens("d"); got != tc.want {
				t.Fatalf("local tokens %g, want %g", got, tc.want)
			}
		})
	}
}

// Counts follow registrations and releases, and a request's entry costs no allocation once
// the tracker has held as many requests before.
func TestTrackerCountsWithoutAllocating(t *testing.T) {
	now := time.Unix(1000, 0)
	tr := NewTracker(time.Minute, func() time.Time { return now })
	ids := []string{"r0", "r1", "r2", "r3"}
	for _, id := range ids {
		tr.Register(id, "p", "d")
	}
	tr.RegisterLocal("r4", "d", 100)
	if tr.PrefillCount("p") != 4 || tr.PendingDecode("d") != 5 || tr.LocalTokens("d") != 100 || tr.Len() != 5 {
		t.Fatalf("prefill %g pending %g local %g entries %d", tr.PrefillCount("p"), tr.PendingDecode("d"), tr.LocalTokens("d"), tr.Len())
	}
	for _, id := range append(ids, "r4") {
		tr.Done(id)
	}
	if tr.PrefillCount("p") != 0 || tr.PendingDecode("d") != 0 || tr.LocalTokens("d") != 0 || tr.Len() != 0 {
		t.Fatalf("after release: prefill %g pending %g local %g entries %d", tr.PrefillCount("p"), tr.PendingDecode("d"), tr.LocalTokens("d"), tr.Len())
	}
	if n := testing.AllocsPerRun(100, func() {
		for _, id := range ids {
			tr.Register(id, "p", "d")
		}
		for _, id := range ids {
			tr.Done(id)
		}
	}); n != 0 {
		t.Fatalf("registering and releasing %d requests allocated %v times", len(ids), n)
	}
}
