package simbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
)

// forEachParallel calls run(i) for every i in [0, n) on up to parallel goroutines (at least
// one), handing indexes out in order; it hands out no more once ctx ends and returns when
// every call it started has. The sweeps' runs are independent: each measures the EPP's CPU on
// its own locked thread.
func forEachParallel(ctx context.Context, parallel, n int, run func(i int)) {
	next := make(chan int)
	var wg sync.WaitGroup
	for range max(1, min(parallel, n)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				run(i)
			}
		}()
	}
	for i := range n {
		if ctx.Err() != nil {
			break
		}
		next <- i
	}
	close(next)
	wg.Wait()
}

// runJobs runs every job through forEachParallel and keeps each one's result at the job's
// index, so reports list runs in the order the options name them whatever order they finish
// in. The error is ctx's once it has ended (jobs it kept from starting have zero results),
// otherwise every failed job's error joined; a failed job's result is kept as run returned it.
func runJobs[J, R any](ctx context.Context, parallel int, jobs []J, run func(J) (R, error)) ([]R, error) {
	results := make([]R, len(jobs))
	errs := make([]error, len(jobs))
	forEachParallel(ctx, parallel, len(jobs), func(i int) {
		results[i], errs[i] = run(jobs[i])
	})
	if err := ctx.Err(); err != nil {
		return results, err
	}
	return results, errors.Join(errs...)
}

// pair is one element of the cross product of two option lists.
type pair[A, B any] struct {
	a A
	b B
}

// crossJobs is every (a, b) with a in as and b in bs, a-major: the order the sweeps print and
// report their runs in.
func crossJobs[A, B any](as []A, bs []B) []pair[A, B] {
	out := make([]pair[A, B], 0, len(as)*len(bs))
	for _, a := range as {
		for _, b := range bs {
			out = append(out, pair[A, B]{a, b})
		}
	}
	return out
}

// lockedPrintf is fmt.Fprintf to w for runs in parallel: each call is whole, so a run that
// prints its line (or block of lines) with one call never interleaves with another's.
func lockedPrintf(w io.Writer) func(format string, a ...any) {
	var mu sync.Mutex
	return func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(w, format, a...)
	}
}
