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
//
// The window after the move is not always enough. The advisor holds a role's scale-up for its
// dwell (hold) before it lets it come down, so advice published while the move was under way,
// from readings of the fleet before it, can stand unchanged well past that window. At 64 GPUs
// in the code phase a prefill move's backlog, flushed into the decode pods, raised the decode
// advice from 19 to 24 replicas while the new prefill pods provisioned. The advisor held that
// for 130 s, and the gate let it turn the split back 2 GPUs; the raise came down 20 s later and
// the split turned again. So a reversal must also be asked for by advice formed on the settled
// fleet: the advice moved that way after the fleet settled, or the whole hold has passed since
// the window after the settle, when no published value can rest on an older reading.
type reversalGate struct {
	// band is the smallest change of the split acted on, in GPUs (0: 1).
	band int
	// window is the advisor's measurement window; hold its dwell.
	window, hold time.Duration

	dir       int  // +1 after a move towards prefill, -1 towards decode, 0 before any move
	inFlight  bool // the last move's pods still provision or drain
	settledAt time.Time
	// atSettle is the prefill target advised when the fleet last settled (read: whether it has
	// been taken since)
	atSettle int
	read     bool
}

// observe records whether the fleet is at its target now: nothing provisioning, nothing
// draining.
func (g *reversalGate) observe(now time.Time, settled bool) {
	if g.inFlight && settled {
		g.inFlight, g.settledAt, g.read = false, now, false
	}
}

// allow reports whether changing the prefill target from cur to the advised one is acted on,
// and records it as the last move when it is. resolution is what one replica of the advice
// moves the split by (adviceResolution): a change no larger than that is within the advice's
// rounding.
func (g *reversalGate) allow(now time.Time, cur, advised, resolution int) bool {
	if !g.inFlight && !g.read {
		g.atSettle, g.read = advised, true
	}
	dir := g.direction(advised-cur, resolution)
	if dir == 0 {
		return false
	}
	if g.dir != 0 && dir != g.dir {
		since := now.Sub(g.settledAt)
		if g.inFlight || since < g.window {
			return false
		}
		if g.direction(advised-g.atSettle, resolution) != dir && since < g.window+g.hold {
			return false // the advice that reverses predates the settled fleet
		}
	}
	g.dir, g.inFlight = dir, true
	return true
}

// direction is +1 or -1 for a change of the prefill target by delta GPUs outside the band and
// the advice's rounding, 0 for one within them.
func (g *reversalGate) direction(delta, resolution int) int {
	if size := max(delta, -delta); size < max(g.band, 1) || size <= resolution {
		return 0
	}
	if delta < 0 {
		return -1
	}
	return 1
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
