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
// it as the last move when it is.
func (g *reversalGate) allow(now time.Time, delta int) bool {
	if max(delta, -delta) < max(g.band, 1) {
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
