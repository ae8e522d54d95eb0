package contract

import "time"

// The simulation (pdgate bench sim) runs the EPP's plugins on a virtual clock, so that a run
// repeats for a seed and an hour of traffic replays in seconds. A plugin that keeps time of its
// own says so through these interfaces; the simulation never names a concrete plugin type.

// Clocked is implemented by plugins that read the time (TTLs, in-flight trackers).
type Clocked interface {
	// UseClock replaces the wall clock with now and stops the plugin's wall-clock background
	// work, which a Swept plugin then runs from Sweep.
	UseClock(now func() time.Time)
}

// Swept is implemented by plugins with a periodic janitor.
type Swept interface {
	// Sweep runs one janitor pass.
	Sweep()
	// SweepEvery is how often the janitor runs.
	SweepEvery() time.Duration
}

// Settler is implemented by plugins whose request hooks finish on another goroutine (an index
// written asynchronously after PreRequest).
type Settler interface {
	// Wait returns once the work of every earlier hook is applied.
	Wait()
}
