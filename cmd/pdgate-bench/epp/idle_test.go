package epp

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// fakeEPPCounters stand in for an EPP's meter and its pods' scrape counter: each wait runs
// the next slice's scrapes at the given cost per scrape plus a fixed extra.
type fakeEPPCounters struct {
	cpu     time.Duration
	scrapes int64
	slices  []struct {
		scrapes int64
		extra   time.Duration
	}
	perScrape time.Duration
	waited    time.Duration
}

func (f *fakeEPPCounters) meter() (time.Duration, error) { return f.cpu, nil }
func (f *fakeEPPCounters) count() int64                  { return f.scrapes }
func (f *fakeEPPCounters) wait(_ context.Context, d time.Duration) error {
	s := f.slices[0]
	f.slices = f.slices[1:]
	f.scrapes += s.scrapes
	f.cpu += time.Duration(s.scrapes)*f.perScrape + s.extra
	f.waited += d
	return nil
}

func TestMeasureIdle(t *testing.T) {
	for _, tc := range []struct {
		name          string
		slices        []int64
		extras        []time.Duration
		wantPerScrape float64 // ms
		wantErr       float64 // ms; NaN: none
	}{
		// Every slice costs exactly its scrapes: the estimate is exact and its error 0.
		{name: "exact", slices: []int64{10, 12, 8, 10}, extras: []time.Duration{0, 0, 0, 0}, wantPerScrape: 0.5, wantErr: 0},
		// One slice carries 8 ms of other work (a GC cycle): R = (40×0.5+8)/40 = 0.7 ms, and
		// the residuals c_j − R·s_j are −2, −2, −2, +6 ms: sqrt(48/3)/(10·2) = 0.2 ms.
		{name: "one slice with a GC", slices: []int64{10, 10, 10, 10}, extras: []time.Duration{0, 0, 0, 8 * time.Millisecond},
			wantPerScrape: 0.7, wantErr: 0.2},
		// One slice: no scatter to judge the estimate by.
		{name: "one slice", slices: []int64{20}, extras: []time.Duration{0}, wantPerScrape: 0.5, wantErr: math.NaN()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeEPPCounters{perScrape: 500 * time.Microsecond, cpu: 7 * time.Second, scrapes: 1000}
			for i, s := range tc.slices {
				f.slices = append(f.slices, struct {
					scrapes int64
					extra   time.Duration
				}{s, tc.extras[i]})
			}
			id, err := MeasureIdle(context.Background(), f.meter, f.count, 4*time.Second, len(tc.slices), f.wait)
			if err != nil {
				t.Fatal(err)
			}
			if f.waited != 4*time.Second || len(id.SliceCPU) != len(tc.slices) || id.Window != 4*time.Second {
				t.Fatalf("waited %s over %d slices, idle %+v", f.waited, len(id.SliceCPU), id)
			}
			if !id.PerScrape() || math.Abs(id.MSPerScrape()-tc.wantPerScrape) > 1e-9 {
				t.Fatalf("per scrape %v ms, want %v", id.MSPerScrape(), tc.wantPerScrape)
			}
			if got := id.MSPerScrapeErr(); !(math.IsNaN(tc.wantErr) && math.IsNaN(got)) && math.Abs(got-tc.wantErr) > 1e-9 {
				t.Fatalf("error %v ms, want %v", got, tc.wantErr)
			}
		})
	}
}

func TestMeasureIdleErrors(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	ok := func() (time.Duration, error) { return 0, nil }
	if _, err := MeasureIdle(ctx, ok, func() int64 { return 0 }, time.Second, 2, sleepCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled: %v", err)
	}
	broken := func() (time.Duration, error) { return 0, errors.New("callgrind gone") }
	if _, err := MeasureIdle(context.Background(), broken, func() int64 { return 0 }, time.Second, 2, sleepCtx); err == nil {
		t.Fatal("a failing meter was not reported")
	}
}

func TestIdleNet(t *testing.T) {
	// 20 scrapes at 0.5 ms in a 2 s window: 5 ms/s, or 0.5 ms per scrape.
	perScrape := Idle{Window: 2 * time.Second, CPU: 10 * time.Millisecond, Scrapes: 20,
		SliceCPU: []time.Duration{5 * time.Millisecond, 5 * time.Millisecond}, SliceScrapes: []int64{10, 10}}
	// The floor: nothing scraped, 1 ms/s of runtime.
	perSecond := Idle{Window: 2 * time.Second, CPU: 2 * time.Millisecond}
	noisy := perScrape
	noisy.SliceCPU = []time.Duration{4 * time.Millisecond, 6 * time.Millisecond} // R 0.5, residuals ∓1 ms: err sqrt(2)/(10·√2) = 0.1 ms
	for _, tc := range []struct {
		name       string
		idle       Idle
		load       LoadResult
		wantNet    float64
		wantErr    float64
		wantPerSec float64
	}{
		{name: "per scrape, every tick served", idle: perScrape,
			load:    LoadResult{Requests: 100, CPU: 500 * time.Millisecond, Wall: 2 * time.Second, Scrapes: 20},
			wantNet: 4.9, wantPerSec: 4.9},
		// The EPP fell behind and served half its ticks over a phase twice as long: per scrape
		// charges the 20 scrapes it served; per second would charge 40.
		{name: "per scrape, ticks dropped", idle: perScrape,
			load:    LoadResult{Requests: 100, CPU: 500 * time.Millisecond, Wall: 4 * time.Second, Scrapes: 20},
			wantNet: 4.9, wantPerSec: 4.8},
		{name: "error carried per request", idle: noisy,
			load:    LoadResult{Requests: 100, CPU: 500 * time.Millisecond, Wall: 4 * time.Second, Scrapes: 40},
			wantNet: 4.8, wantErr: 0.1 * 40 / 100, wantPerSec: 4.8},
		{name: "no scrapes idle: per second", idle: perSecond,
			load:    LoadResult{Requests: 100, CPU: 500 * time.Millisecond, Wall: 4 * time.Second, Scrapes: 3},
			wantNet: 4.96, wantPerSec: 4.96},
		{name: "never below zero", idle: perScrape,
			load:    LoadResult{Requests: 10, CPU: time.Millisecond, Wall: time.Second, Scrapes: 10},
			wantNet: 0, wantPerSec: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			net, e := tc.idle.Net(tc.load)
			if math.Abs(net-tc.wantNet) > 1e-9 || math.Abs(e-tc.wantErr) > 1e-9 {
				t.Fatalf("net %v ± %v, want %v ± %v", net, e, tc.wantNet, tc.wantErr)
			}
			if got := tc.idle.NetPerSecond(tc.load); math.Abs(got-tc.wantPerSec) > 1e-9 {
				t.Fatalf("per second %v, want %v", got, tc.wantPerSec)
			}
		})
	}
	if net, e := perScrape.Net(LoadResult{}); !math.IsNaN(net) || !math.IsNaN(e) {
		t.Fatal("no requests should be NaN")
	}
	if math.Abs(perScrape.MSPerS()-5) > 1e-9 || !math.IsNaN(perSecond.MSPerScrape()) || perSecond.PerScrape() {
		t.Fatalf("rates: %v ms/s, %v per scrape", perScrape.MSPerS(), perSecond.MSPerScrape())
	}
	if got := idlePerScrapeText(noisy); got != "500.0 ± 100.0 µs (20.0 %)" {
		t.Fatalf("text %q", got)
	}
	if got := idlePerScrapeText(perSecond); got != "none (charged per second)" {
		t.Fatalf("text %q", got)
	}
}
