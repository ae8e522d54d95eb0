package epp

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Idle subtraction. Between requests an EPP scrapes every pod's /metrics (GIE's refresh loop)
// and that work runs during a load phase as well; the net figure removes it. Removing it at
// the idle rate per wall second over-subtracts whenever the EPP falls behind: an EPP slowed by
// callgrind, or starved of a core on a busy machine, drops refresh ticks (Go's tickers skip
// what the receiver missed), so a phase that lasted twice as long did not scrape twice as
// often. The fake pods count the scrapes they serve, so the idle cost is measured per scrape
// and each phase is charged for the scrapes it actually served. An EPP that scraped nothing
// while idle (the floor) is charged per wall second, as before.

// Idle is the EPP's idle cost, measured before the load over a window cut into slices.
type Idle struct {
	Window  time.Duration `json:"windowNs"`
	CPU     time.Duration `json:"cpuNs"` // metered over the window (instructions in ns under --instructions)
	Scrapes int64         `json:"scrapes"`
	// SliceCPU and SliceScrapes are each slice's share: their scatter around one cost per
	// scrape is the estimate's error.
	SliceCPU     []time.Duration `json:"sliceCpuNs,omitempty"`
	SliceScrapes []int64         `json:"sliceScrapes,omitempty"`
}

// MSPerS is the idle rate per wall second, in ms (M instructions) per second.
func (i Idle) MSPerS() float64 {
	if i.Window <= 0 {
		return 0
	}
	return ms(i.CPU) / i.Window.Seconds()
}

// PerScrape reports whether phases are charged per scrape (the window saw scrapes).
func (i Idle) PerScrape() bool { return i.Scrapes > 0 }

// MSPerScrape is the idle cost of one scrape, in ms (M instructions); NaN without scrapes.
func (i Idle) MSPerScrape() float64 {
	if i.Scrapes <= 0 {
		return math.NaN()
	}
	return ms(i.CPU) / float64(i.Scrapes)
}

// MSPerScrapeErr is the standard error of MSPerScrape: the ratio estimator's, from the slices'
// residuals around it (sqrt(Σ(c_j − R·s_j)² / (k−1)) / (mean s · √k)). It is what one idle
// window can say about itself; NaN with fewer than two slices or no scrapes.
func (i Idle) MSPerScrapeErr() float64 {
	k := len(i.SliceCPU)
	if k < 2 || len(i.SliceScrapes) != k || i.Scrapes <= 0 {
		return math.NaN()
	}
	r := i.MSPerScrape()
	var ss float64
	for j := range k {
		d := ms(i.SliceCPU[j]) - r*float64(i.SliceScrapes[j])
		ss += d * d
	}
	meanS := float64(i.Scrapes) / float64(k)
	return math.Sqrt(ss/float64(k-1)) / (meanS * math.Sqrt(float64(k)))
}

// Net is a phase's metered cost per request less the idle cost of the phase, and the error the
// idle estimate carries into it (per request; 0 when charged per second, which has none
// measured). Per scrape when the idle window saw scrapes: MSPerScrape × the scrapes the phase
// served; else MSPerS × its wall time.
func (i Idle) Net(l LoadResult) (net, err float64) {
	if l.Requests == 0 {
		return math.NaN(), math.NaN()
	}
	idle := i.MSPerS() * l.Wall.Seconds()
	if i.PerScrape() {
		idle = i.MSPerScrape() * float64(l.Scrapes)
		if e := i.MSPerScrapeErr(); !math.IsNaN(e) {
			err = e * float64(l.Scrapes) / float64(l.Requests)
		}
	}
	return max(ms(l.CPU)-idle, 0) / float64(l.Requests), err
}

// NetPerSecond is the net figure with the idle cost removed per wall second, as the bench did
// before it counted scrapes: kept in the JSON and the log to show what the per-scrape charge
// changes.
func (i Idle) NetPerSecond(l LoadResult) float64 {
	if l.Requests == 0 {
		return math.NaN()
	}
	return max(ms(l.CPU)-i.MSPerS()*l.Wall.Seconds(), 0) / float64(l.Requests)
}

// MeasureIdle meters the EPP over window in the given number of slices, reading the meter and
// the scrape counter together at every slice boundary; wait sleeps (tests pass one that
// advances fake counters).
func MeasureIdle(ctx context.Context, meter CPUFunc, scrapes func() int64, window time.Duration, slices int,
	wait func(context.Context, time.Duration) error) (Idle, error) {
	slices = max(1, slices)
	id := Idle{}
	c0, err := meter()
	if err != nil {
		return id, fmt.Errorf("idle: reading the meter: %w", err)
	}
	s0 := scrapes()
	for range slices {
		if err := wait(ctx, window/time.Duration(slices)); err != nil {
			return id, fmt.Errorf("idle: %w", err)
		}
		c1, err := meter()
		if err != nil {
			return id, fmt.Errorf("idle: reading the meter: %w", err)
		}
		s1 := scrapes()
		id.SliceCPU, id.SliceScrapes = append(id.SliceCPU, c1-c0), append(id.SliceScrapes, s1-s0)
		id.CPU, id.Scrapes = id.CPU+c1-c0, id.Scrapes+s1-s0
		c0, s0 = c1, s1
	}
	id.Window = window
	return id, nil
}

// sleepCtx waits d or until ctx ends.
func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// idleWindow is how long, in how many slices, the idle cost is measured: long enough that what
// a window's edges cut weighs little. Under callgrind the pods are scraped once a second
// (instructionRefresh), and an idle EPP collects its scrapes' garbage in lumps of ~25 M
// instructions every 15 s or so, a quarter of its idle cost: 60 s holds about four of them
// (one more or less is ±7 %, where 30 s gave ±13 % and showed 15-23 % standard errors) and
// about 1,000 scrapes of a 16-pod pool, where 5 s (the window before) held 80.
func (o *Options) idleWindow() (time.Duration, int) {
	switch {
	case o.Instructions:
		return 60 * time.Second, 12
	case o.Quick:
		return time.Second, 4
	}
	return 2 * time.Second, 4 // 10 ms ticks: ~1 % resolution at 50 ms/s of scraping
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func netOnly(net, _ float64) float64 { return net }

// idlePerScrapeText is the log's and the report's idle cost per scrape: "412.3 ± 6.1 µs
// (1.5 %)", or "none (charged per second)" for an EPP that scraped nothing.
func idlePerScrapeText(i Idle) string {
	if !i.PerScrape() {
		return "none (charged per second)"
	}
	v, e := 1000*i.MSPerScrape(), 1000*i.MSPerScrapeErr()
	if math.IsNaN(e) {
		return fmt.Sprintf("%.1f µs", v)
	}
	return fmt.Sprintf("%.1f ± %.1f µs (%.1f %%)", v, e, 100*e/v)
}
