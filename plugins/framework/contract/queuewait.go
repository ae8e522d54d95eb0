package contract

import (
	"context"
	"time"
)

// The EPP's admission may hold a request before any plugin hook sees it: GIE's flow control
// queues it until the pool has room. That wait is part of the TTFT the client measures, so a
// plugin that forecasts a request's TTFT from the moment it runs must add it, or it judges a
// request that already waited past its objective as if it had just arrived.

type queueWaitKey struct{}

// WithQueueWait returns ctx carrying d, the time the request waited in the EPP's admission
// queue before the plugin hooks ran. The EPP sets it only when a queue held the request.
func WithQueueWait(ctx context.Context, d time.Duration) context.Context {
	return context.WithValue(ctx, queueWaitKey{}, d)
}

// QueueWait is the time the request waited in the EPP's admission queue (0 when none was
// recorded on ctx).
func QueueWait(ctx context.Context) time.Duration {
	d, _ := ctx.Value(queueWaitKey{}).(time.Duration)
	return d
}
