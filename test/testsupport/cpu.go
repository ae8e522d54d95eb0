package testsupport

import (
	"runtime"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
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

// ThreadCPU is the CPU time of the calling OS thread (the caller locks its goroutine to it):
// the work of the code under test, its own page faults and the collection assists it pays, but
// not the collector's or the scavenger's background threads, whose work lands on whatever is
// being timed when they run. CLOCK_THREAD_CPUTIME_ID, not getrusage(RUSAGE_THREAD): the
// latter is only as fresh as the last scheduler tick (milliseconds). 0 where it cannot be read.
func ThreadCPU() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}

// LoopCPU runs op under b.Loop and reports the process CPU time per op as "cpu-ns/op" (the
// figure the benchmarks compare against a baseline of the same run); it returns that and the
// heap allocations per op. An op that fails stops the benchmark.
func LoopCPU(b *testing.B, op func() error) (cpuNs, allocs float64) {
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	c0 := ProcessCPU()
	for b.Loop() {
		if err := op(); err != nil {
			b.Fatal(err)
		}
	}
	cpu := ProcessCPU() - c0
	runtime.ReadMemStats(&m1)
	cpuNs = float64(cpu.Nanoseconds()) / float64(b.N)
	b.ReportMetric(cpuNs, "cpu-ns/op")
	return cpuNs, float64(m1.Mallocs-m0.Mallocs) / float64(b.N)
}
