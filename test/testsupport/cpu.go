package testsupport

import (
	"syscall"
	"time"
)

// ProcessCPU is the process's user plus system CPU time so far (GC workers included): what
// the benchmarks measure, because on a shared, oversubscribed machine it is far steadier than
// wall time, which counts the time other processes held the cores. 0 where it cannot be read.
func ProcessCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
