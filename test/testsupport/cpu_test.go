package testsupport

import (
	"errors"
	"testing"
)

var sink []byte

// LoopCPU counts the op's own allocations (one 4 KiB slice per op here, none for the loop),
// and reports a CPU time for a loop that did work.
func TestLoopCPU(t *testing.T) {
	tests := []struct {
		name       string
		op         func() error
		wantAllocs float64
	}{
		{name: "allocating op", op: func() error { sink = make([]byte, 4096); return nil }, wantAllocs: 1},
		{name: "allocation-free op", op: func() error { sink = sink[:0]; return nil }, wantAllocs: 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var cpu, allocs float64
			r := testing.Benchmark(func(b *testing.B) { cpu, allocs = LoopCPU(b, tt.op) })
			if r.N == 0 {
				t.Fatal("the benchmark did not run")
			}
			if allocs < tt.wantAllocs || allocs > tt.wantAllocs+0.1 {
				t.Errorf("allocs/op = %.3f, want %.0f", allocs, tt.wantAllocs)
			}
			if cpu <= 0 || r.Extra["cpu-ns/op"] != cpu {
				t.Errorf("cpu-ns/op = %v, reported %v; want the same positive figure", cpu, r.Extra["cpu-ns/op"])
			}
		})
	}
}

// A failing op stops the benchmark at its first call.
func TestLoopCPUStopsOnError(t *testing.T) {
	calls := 0
	r := testing.Benchmark(func(b *testing.B) {
		LoopCPU(b, func() error { calls++; return errors.New("boom") })
	})
	if calls != 1 {
		t.Fatalf("a failing op ran %d times (N=%d), want a stop at the first", calls, r.N)
	}
}
