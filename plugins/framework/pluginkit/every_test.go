package pluginkit

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

func TestEveryRunsUntilTheContextEnds(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var n atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Millisecond, func() {
			if n.Add(1) == 3 {
				cancel()
			}
		})
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Every did not return after its context ended")
	}
	if n.Load() < 3 {
		t.Fatalf("f ran %d times before the context ended, want 3", n.Load())
	}
}
