package tokenestimate

import (
	"time"

	"golang.org/x/sys/unix"
)

// threadCPU is the CPU time of the calling OS thread (the caller locks its goroutine to it):
// the work of the code under test, its own page faults and the collection assists it pays, but
// not the collector's or the scavenger's background threads, whose work lands on whatever is
// being timed when they run. CLOCK_THREAD_CPUTIME_ID, not getrusage(RUSAGE_THREAD): the
// latter is only as fresh as the last scheduler tick (milliseconds), longer than a round.
func threadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
