package latencyobserver

import (
	"math"
	"slices"
	"time"

	"github.com/pdgate/pdgate/plugins/latency/internal/ttftpercentiles"
)

// observation is one streamed request: when its first chunk came, its TTFT in seconds, and the
// endpoint's in-flight count when it was dispatched.
type observation struct {
	at       time.Time
	ttft     float64
	inflight float64
}

// endpointState is one endpoint's observations: the short window (a ring of windowSize), the
// current floor bucket's TTFTs and the history of per-bucket P10s.
type endpointState struct {
	ring         []observation
	next         int
	observations int64
	bucketStart  time.Time
	bucket       []float64
	history      []float64
}

func (s *endpointState) add(o observation, windowSize int) {
	if len(s.ring) < windowSize {
		s.ring = append(s.ring, o)
	} else {
		s.ring[s.next] = o
		s.next = (s.next + 1) % windowSize
	}
	s.observations++
	if s.bucketStart.IsZero() {
		s.bucketStart = o.at
	}
	s.bucket = append(s.bucket, o.ttft)
}

// recent returns the short window: observations no older than maxAge, the newest maxRequests.
func (s *endpointState) recent(now time.Time, maxAge time.Duration, maxRequests int) []observation {
	out := make([]observation, 0, min(len(s.ring), maxRequests))
	for i := 1; i <= len(s.ring) && len(out) < maxRequests; i++ {
		o := s.ring[(s.next-i+len(s.ring))%len(s.ring)] // newest first
		if now.Sub(o.at) > maxAge {
			break
		}
		out = append(out, o)
	}
	return out
}

// rollBucket closes the floor bucket once bucketDuration has passed: its P10 joins the history,
// and a full history drops its largest entry, so the floor forgets slow spells before fast ones.
func (s *endpointState) rollBucket(now time.Time, bucketDuration time.Duration, historySize int) {
	if s.bucketStart.IsZero() || now.Sub(s.bucketStart) < bucketDuration {
		return
	}
	if len(s.bucket) > 0 {
		slices.Sort(s.bucket)
		s.history = append(s.history, percentile(s.bucket, 10))
		if len(s.history) > historySize {
			i := 0
			for j, v := range s.history {
				if v > s.history[i] {
					i = j
				}
			}
			s.history = slices.Delete(s.history, i, i+1)
		}
	}
	s.bucket, s.bucketStart = s.bucket[:0], now
}

// snapshot computes what the producer publishes for the endpoint now.
func (s *endpointState) snapshot(now time.Time, p Parameters) *ttftpercentiles.TTFTPercentiles {
	w := s.recent(now, p.MaxObservationAge.Duration, p.MaxRequests)
	m := &ttftpercentiles.TTFTPercentiles{RecentRequestCount: len(w), Observations: s.observations, CalibrationThreshold: p.MinRequests}
	if len(s.history) > 0 {
		m.FloorTTFT = percentile(slices.Sorted(slices.Values(s.history)), 10)
	}
	if len(w) == 0 {
		return m
	}
	slices.SortStableFunc(w, func(a, b observation) int {
		switch {
		case a.ttft < b.ttft:
			return -1
		case a.ttft > b.ttft:
			return 1
		}
		return 0
	})
	ttfts := make([]float64, len(w))
	for i, o := range w {
		ttfts[i] = o.ttft
	}
	m.WindowFloorTTFT = percentile(ttfts, 10)
	m.LowLoadTTFT, m.InflightAtLowLoad = percentile(ttfts, p.LowPercentile), bandInflight(w, p.LowPercentile)
	m.TypicalLoadTTFT, m.InflightAtTypicalLoad = percentile(ttfts, p.TypicalPercentile), bandInflight(w, p.TypicalPercentile)
	return m
}

// rank is the nearest-rank index of percentile q in n sorted values.
func rank(q float64, n int) int {
	return min(max(int(math.Ceil(q/100*float64(n)))-1, 0), n-1)
}

// percentile is the nearest-rank percentile q of sorted (non-empty) values.
func percentile(sorted []float64, q float64) float64 { return sorted[rank(q, len(sorted))] }

// bandInflight is the mean in-flight-at-dispatch over the observations (sorted by TTFT) that
// rank between percentiles q−10 and q+10.
func bandInflight(sorted []observation, q float64) float64 {
	lo, hi := rank(max(q-10, 0), len(sorted)), rank(min(q+10, 100), len(sorted))
	var sum float64
	for _, o := range sorted[lo : hi+1] {
		sum += o.inflight
	}
	return sum / float64(hi-lo+1)
}
