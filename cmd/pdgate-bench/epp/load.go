package epp

import (
	"context"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// LoadSpec is one closed-loop measurement: Requests exchanges (or fewer if MaxDuration ends
// first) by Concurrency workers, each starting its next exchange when the last one ended.
type LoadSpec struct {
	Requests    int
	Concurrency int
	MaxDuration time.Duration
	// Make builds the i-th exchange (called from the workers; must be safe for that).
	Make func(i int) *Exchange
	// Settle, when set, runs after the last exchange and before the phase's wall time and CPU
	// are read: work the EPP does later on the phase's behalf (a traced EPP's span export)
	// then counts in the phase.
	Settle func(context.Context)
	// Scrapes, when set, counts the metric scrapes the EPP's pods have served; read next to
	// the meter, it gives LoadResult.Scrapes (idle.go charges the phase's idle cost per scrape).
	Scrapes func() int64
}

// LoadResult is what a measurement saw. CPU is the EPP process's CPU time over the run.
type LoadResult struct {
	Requests  int            `json:"requests"`
	OK        int            `json:"ok"`
	Errors    int            `json:"errors"`
	Immediate map[int]int    `json:"immediate,omitempty"` // status -> count
	FirstErr  string         `json:"firstError,omitempty"`
	Wall      time.Duration  `json:"wallNs"`
	CPU       time.Duration  `json:"eppCpuNs"`
	Scrapes   int64          `json:"scrapes"` // served by the EPP's pods over the phase (LoadSpec.Scrapes)
	RoutingMS []float64      `json:"-"`       // sorted, routed exchanges only
	Dest      map[string]int `json:"destinations"`
	// Decisions is the phase's decision mix (decisions.go), read from the EPP's counters;
	// nil for EPPs without them.
	Decisions Decisions `json:"decisions,omitempty"`
}

// ReqPerSec is completed exchanges per wall second.
func (r LoadResult) ReqPerSec() float64 {
	if r.Wall <= 0 {
		return math.NaN()
	}
	return float64(r.Requests) / r.Wall.Seconds()
}

// CPUPerRequestMS is the EPP's CPU milliseconds per exchange.
func (r LoadResult) CPUPerRequestMS() float64 {
	if r.Requests == 0 {
		return math.NaN()
	}
	return float64(r.CPU) / float64(time.Millisecond) / float64(r.Requests)
}

// CPUFunc reads the EPP's cumulative CPU time.
type CPUFunc func() (time.Duration, error)

// RunLoad runs spec against c and measures the EPP's CPU time around it.
func RunLoad(ctx context.Context, c *Client, spec LoadSpec, cpu CPUFunc) (LoadResult, error) {
	if spec.Requests < 1 || spec.Concurrency < 1 || spec.Make == nil {
		return LoadResult{}, fmt.Errorf("load: requests=%d concurrency=%d: want >= 1 each and a request maker", spec.Requests, spec.Concurrency)
	}
	res := LoadResult{Immediate: map[int]int{}, Dest: map[string]int{}}
	var (
		next     atomic.Int64
		mu       sync.Mutex
		wg       sync.WaitGroup
		deadline time.Time
	)
	if spec.MaxDuration > 0 {
		deadline = time.Now().Add(spec.MaxDuration)
	}
	scrapes := spec.Scrapes
	if scrapes == nil {
		scrapes = func() int64 { return 0 }
	}
	cpu0, err := cpu()
	if err != nil {
		return res, err
	}
	scr0 := scrapes()
	start := time.Now()
	for w := 0; w < min(spec.Concurrency, spec.Requests); w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= spec.Requests || ctx.Err() != nil || (!deadline.IsZero() && time.Now().After(deadline)) {
					return
				}
				o := c.Do(ctx, spec.Make(i), nil, nil)
				mu.Lock()
				res.add(o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if spec.Settle != nil {
		spec.Settle(ctx)
	}
	res.Wall = time.Since(start)
	cpu1, err := cpu()
	if err != nil {
		return res, err
	}
	res.CPU, res.Scrapes = cpu1-cpu0, scrapes()-scr0
	sort.Float64s(res.RoutingMS)
	return res, ctx.Err()
}

func (r *LoadResult) add(o Outcome) {
	r.Requests++
	switch {
	case o.Err != nil:
		r.Errors++
		if r.FirstErr == "" {
			r.FirstErr = o.Err.Error()
		}
	case o.Immediate != 0:
		r.Immediate[o.Immediate]++
		if r.FirstErr == "" {
			r.FirstErr = fmt.Sprintf("immediate response %d", o.Immediate)
		}
	default:
		r.OK++
		r.Dest[o.Destination]++
		r.RoutingMS = append(r.RoutingMS, float64(o.Routing)/float64(time.Millisecond))
	}
}

// BurstResult counts where a burst went.
type BurstResult struct {
	Requests int            `json:"requests"`
	Errors   int            `json:"errors"`
	FirstErr string         `json:"firstError,omitempty"`
	Dest     map[string]int `json:"destinations"`
}

// RunBurst sends n exchanges back to back, each one once the previous was routed, and keeps
// every one in flight (no response yet) until all n are routed: a burst that arrives between
// two metric scrapes. Then all responses complete.
func RunBurst(ctx context.Context, c *Client, n int, mk func(i int) *Exchange) BurstResult {
	res := BurstResult{Dest: map[string]int{}}
	hold := make(chan struct{})
	var wg sync.WaitGroup
	for i := 0; i < n && ctx.Err() == nil; i++ {
		routed := make(chan Outcome, 1)
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Do(ctx, mk(i), hold, func(o Outcome) { routed <- o })
		}()
		o := <-routed
		res.Requests++
		if !o.OK() {
			res.Errors++
			if res.FirstErr == "" {
				res.FirstErr = fmt.Sprintf("%v (immediate %d)", o.Err, o.Immediate)
			}
			continue
		}
		res.Dest[o.Destination]++
	}
	close(hold)
	wg.Wait()
	return res
}

// Spread is max/min requests per pod over the given pods (+Inf when one got none, NaN when
// there are no pods).
func Spread(dest map[string]int, pods []string) float64 {
	if len(pods) == 0 {
		return math.NaN()
	}
	lo, hi := math.MaxInt, 0
	for _, p := range pods {
		n := dest[p]
		lo, hi = min(lo, n), max(hi, n)
	}
	if lo == 0 {
		return math.Inf(1)
	}
	return float64(hi) / float64(lo)
}
