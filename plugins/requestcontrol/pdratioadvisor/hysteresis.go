package pdratioadvisor

import (
	"math"
	"time"
)

// stabilizer turns a role's raw estimates into the published replica count without flapping:
//
//   - a change must leave the band around the published count: differ by more than
//     band × published, and by at least one replica;
//   - a scale-down goes to the highest estimate of the last dwell, and only once estimates
//     cover a whole dwell (the lower demand held for that long; HPA's stabilisation window);
//   - a scale-up after a scale-down waits a dwell after that change (a scale-down after a
//     scale-up waits by the previous rule), so the direction changes at most once a dwell.
//
// Scale-ups in the same direction are immediate: an SLO breach costs more than a replica.
type stabilizer struct {
	band  float64
	dwell time.Duration

	published int
	has       bool
	changedAt time.Time
	dir       int // +1 after a scale-up, -1 after a scale-down, 0 before any change
	history   []rawAt
	since     time.Time // the first estimate
}

type rawAt struct {
	at  time.Time
	raw int
}

func newStabilizer(band float64, dwell time.Duration) *stabilizer {
	return &stabilizer{band: band, dwell: dwell}
}

// update takes the raw estimate at now and returns the published count.
func (s *stabilizer) update(now time.Time, raw int) int {
	if !s.has {
		s.has, s.published, s.changedAt, s.since = true, raw, now, now
		s.history = append(s.history[:0], rawAt{now, raw})
		return raw
	}
	s.history = append(s.history, rawAt{now, raw})
	for len(s.history) > 1 && now.Sub(s.history[0].at) > s.dwell {
		s.history = s.history[1:]
	}
	switch {
	case raw > s.published && s.outside(raw):
		if s.dir < 0 && now.Sub(s.changedAt) < s.dwell {
			return s.published
		}
		s.set(now, raw, +1)
	case now.Sub(s.since) >= s.dwell:
		high := 0
		for _, h := range s.history {
			high = max(high, h.raw)
		}
		if high < s.published && s.outside(high) {
			s.set(now, high, -1)
		}
	}
	return s.published
}

// outside reports whether n leaves the band around the published count.
func (s *stabilizer) outside(n int) bool {
	d := math.Abs(float64(n - s.published))
	return d >= 1 && d > s.band*float64(s.published)
}

func (s *stabilizer) set(now time.Time, n, dir int) {
	s.published, s.changedAt, s.dir = n, now, dir
}
