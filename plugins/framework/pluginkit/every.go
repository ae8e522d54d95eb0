package pluginkit

import (
	"context"
	"time"
)

// Every calls f every interval until ctx ends, and then returns: the loop of a plugin's
// background sweeper, started in its own goroutine.
func Every(ctx context.Context, interval time.Duration, f func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			f()
		}
	}
}
