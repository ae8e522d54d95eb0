package simbench

import (
	"context"
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
