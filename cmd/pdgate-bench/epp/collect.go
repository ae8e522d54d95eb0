package epp

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"
)

// Phase alignment with the garbage collector. A phase's cost includes the collections that
// fall inside it, and at 16 KB a phase holds only a few: whether it began just after a cycle
// or just before one moves its figure by a whole cycle (the mark of a live heap of tens of MB,
// 40-80 M instructions under callgrind), which is what made two processes of one binary
// disagree by 6-18 % at 16 KB. So every metered window (the idle window and each counted
// phase) starts right after a full collection the bench asks for and does not count: every
// process then begins the window from the same heap state, with the same allocation left to
// the next cycle, and the window's collections are its own. What a window leaves uncollected
// at its end (less than one cycle's garbage) is charged to no one, for every EPP alike: at
// most one cycle's mark per phase, the same in each run, where before it was up to one cycle
// either way at random.
//
// The collection is Go's own: the heap profile handler with gc=1 runs runtime.GC, which
// returns only once the mark and the sweep are done. Every EPP the bench runs serves it (GIE
// and pdgate with --enable-pprof, their default; the floor on its metrics port).

// collectPath asks the process for a full collection before it writes its heap profile.
const collectPath = "/debug/pprof/heap?gc=1"

// collectTimeout bounds one collection: under callgrind a full mark of the EPP's heap and the
// profile take seconds.
const collectTimeout = 5 * time.Minute

// collectGarbage runs a full garbage collection in the process serving metricsAddr and waits
// until it is done.
func collectGarbage(ctx context.Context, client *http.Client, metricsAddr string) error {
	ctx, cancel := context.WithTimeout(ctx, collectTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+metricsAddr+collectPath, nil)
	if err != nil {
		return fmt.Errorf("collecting garbage at %s: %w", metricsAddr, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return fmt.Errorf("collecting garbage at %s: %w", metricsAddr, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("collecting garbage at %s: %s: %s", metricsAddr, resp.Status, msg)
	}
	if _, err := io.Copy(io.Discard, resp.Body); err != nil {
		return fmt.Errorf("collecting garbage at %s: reading the profile: %w", metricsAddr, err)
	}
	return nil
}
