package simbench

import "time"

// reversalGate decides which changes of the advised split the actuator acts on.
//
// The advisor estimates from what the EPP measured over its window. After a move, that window
// describes the fleet before the move until the move is done — the shrunk role's pods have
// finished their routed requests and freed their GPUs, and the grown role's new pods have been
// provisioned and serve — and for a whole window after that. Advice that reverses a move in
// that time answers the queues the move has not relieved yet, and acting on it is what makes a
// fleet flap. So a reversal waits until the last move is done and the advisor has measured the
// resulting fleet for a window: the dwell between directions follows from the provisioning
// delay, the drain and the advisor's window, as the run has them, not from a tuned constant.
// A move in the same direction is acted on at once: it answers the same shortfall, and an SLO
// breach costs more than a GPU moved early.
type reversalGate struct {
	// band is the smallest change of the split acted on, in GPUs (0: 1).
	band int
	// window is the advisor's measurement window.
	window time.Duration

	dir       int  // +1 after a move towards prefill, -1 towards decode, 0 before any move
	inFlight  bool // the last move's pods still provision or drain
	settledAt time.Time
}

// observe records whether the fleet is at its target now: nothing provisioning, nothing
// draining.
func (g *reversalGate) observe(now time.Time, settled bool) {
	if g.inFlight && settled {
		g.inFlight, g.settledAt = false, now
	}
}

// allow reports whether a change of the prefill target by delta GPUs is acted on, and records
// it as the last move when it is. resolution is what one replica of the advice moves the split
// by (adviceResolution): a change no larger than that is within the advice's rounding.
func (g *reversalGate) allow(now time.Time, delta, resolution int) bool {
	if size := max(delta, -delta); size < max(g.band, 1) || size <= resolution {
		return false
	}
	dir := 1
	if delta < 0 {
		dir = -1
	}
	if g.dir != 0 && dir != g.dir && (g.inFlight || now.Sub(g.settledAt) < g.window) {
		return false
	}
	g.dir, g.inFlight = dir, true
	return true
}

// adviceResolution is the most the split of budget moves when the advice for one role (prefill
// p, decode d replicas) moves by one replica. The advisor rounds each role's need up to whole
// replicas, so a need of 3.4 prefill replicas is advised as 4 and one of 2.9 as 3: the advice
// cannot tell apart splits closer than this. When the advice is small against the budget (3:2
// replicas for 16 GPUs) one replica moves the split by several GPUs, and acting on each such
// step turns the fleet back and forth as a steady need rounds one way and then the other.
func adviceResolution(budget, p, d int) int {
	base, _ := splitBudget(budget, p, d)
	res := 0
	for _, pd := range [][2]int{{p + 1, d}, {max(p-1, 1), d}, {p, d + 1}, {p, max(d-1, 1)}} {
		x, _ := splitBudget(budget, pd[0], pd[1])
		res = max(res, x-base, base-x)
	}
	return res
}
