package simbench

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"

	"github.com/pdgate/pdgate/plugins/framework/contract"
)

// ActuatorConfig is the replica actuator of a P/D fleet: a fixed GPU budget that the prefill
// and the decode role share in the ratio the EPP's replica advisor advises.
type ActuatorConfig struct {
	// Budget is the GPUs of the prefill and decode pods together: serving, draining or being
	// provisioned.
	Budget int
	// Delay is the provisioning time of a new pod, from a free GPU to its first request
	// (scheduling, image pull, weights load, warm-up).
	Delay time.Duration
	// Every is how often the actuator reads the advice.
	Every time.Duration
	// Band is the smallest change of the split acted on, in GPUs (0: 1); a change must also
	// exceed what one replica of the advice moves the split by (adviceResolution). Window is the
	// advisor's measurement window: a move the other way waits until the last move is done
	// (its pods serve, the pods it took away have drained) and the advisor has measured the
	// resulting fleet for a window (reversalGate). The advisor stabilises each role on its
	// own, but a split follows the ratio of two roles, which can turn when they move in turn.
	// Hold is the advisor's dwell, for which it holds a role's scale-up before letting it come
	// down: a reversal resting on advice already standing when the fleet settled waits for it
	// too (reversalGate).
	Band         int
	Window, Hold time.Duration
}

// ScaleEvent is one change of the actuator's target split.
type ScaleEvent struct {
	AtSeconds float64 `json:"at"`
	Prefill   int     `json:"prefill"`
	Decode    int     `json:"decode"`
	// Reasons are the advisor's reasons per role at the change.
	Reasons map[string]string `json:"reasons"`
}

// actuator scales the fleet's roles: the advisor's desired replicas, scaled to fill the
// budget in their ratio (the comparison is at equal GPUs), become the target split. A role
// above its target stops taking requests at once (its pod leaves the EPP's pool) and frees
// its GPU once its last routed request ends; a role below its target takes a free GPU and
// serves after the provisioning delay. At least one pod of each role always serves.
type actuator struct {
	s      *Sim
	cfg    ActuatorConfig
	active map[string][]*pod // serving, by role
	// draining pods hold their GPU until their routed requests end
	draining     []*pod
	provisioning map[string][]*provision
	target       map[string]int
	events       []ScaleEvent
	gate         reversalGate
	// usedSeconds integrates the GPUs held (serving, draining, provisioning) over time
	usedSeconds float64
	usedMark    time.Time
}

type provision struct{ cancelled bool }

func newActuator(s *Sim, cfg ActuatorConfig) (*actuator, error) {
	if cfg.Every <= 0 || cfg.Delay < 0 {
		return nil, errors.New("actuator: Every must be > 0 and Delay >= 0")
	}
	if len(s.epps) == 0 || len(s.epps[0].advisors) == 0 {
		return nil, errors.New("actuator: the EndpointPickerConfig has no replica advisor (add a pd-ratio-advisor plugin)")
	}
	a := &actuator{s: s, cfg: cfg, active: map[string][]*pod{}, provisioning: map[string][]*provision{},
		target: map[string]int{}, gate: reversalGate{band: cfg.Band, window: cfg.Window, hold: cfg.Hold}}
	for _, p := range s.pods {
		if p.spec.Role != RolePrefill && p.spec.Role != RoleDecode {
			return nil, fmt.Errorf("actuator: pod %s has role %s; the actuator scales P/D fleets", p.spec.Name, p.spec.Role)
		}
		a.active[p.spec.Role] = append(a.active[p.spec.Role], p)
	}
	if len(a.active[RolePrefill]) == 0 || len(a.active[RoleDecode]) == 0 || len(s.pods) > cfg.Budget {
		return nil, fmt.Errorf("actuator: the initial fleet needs both roles within the budget of %d GPUs", cfg.Budget)
	}
	for _, role := range []string{RolePrefill, RoleDecode} {
		a.target[role] = len(a.active[role])
	}
	return a, nil
}

func (a *actuator) start() {
	a.usedMark = a.s.now()
	a.s.clock.AfterFunc(a.cfg.Every, a.tick)
}

// held is the GPUs held now.
func (a *actuator) held() int {
	n := len(a.draining)
	for _, role := range []string{RolePrefill, RoleDecode} {
		n += len(a.active[role]) + len(a.provisioning[role])
	}
	return n
}

func (a *actuator) account(now time.Time) {
	a.usedSeconds += float64(a.held()) * now.Sub(a.usedMark).Seconds()
	a.usedMark = now
}

func (a *actuator) tick() {
	now := a.s.now()
	a.account(now)
	kept := a.draining[:0]
	for _, p := range a.draining {
		if p.assigned > 0 || len(p.legs) > 0 {
			kept = append(kept, p)
		}
	}
	a.draining = kept
	a.gate.observe(now, a.settled())
	if want, reasons, ok := a.advice(); ok {
		tp, td := splitBudget(a.cfg.Budget, want[RolePrefill], want[RoleDecode])
		res := adviceResolution(a.cfg.Budget, want[RolePrefill], want[RoleDecode])
		if a.gate.allow(now, a.target[RolePrefill], tp, res) {
			a.target[RolePrefill], a.target[RoleDecode] = tp, td
			a.events = append(a.events, ScaleEvent{AtSeconds: now.Sub(a.s.start).Seconds(), Prefill: tp, Decode: td, Reasons: reasons})
		}
	}
	changed := false
	for _, role := range []string{RolePrefill, RoleDecode} {
		changed = a.shrink(role) || changed
	}
	for _, role := range []string{RolePrefill, RoleDecode} {
		a.grow(role)
	}
	if changed {
		a.publish()
	}
	if !a.s.srcDone || a.s.inflight > 0 || len(a.s.held) > 0 {
		a.s.clock.AfterFunc(a.cfg.Every, a.tick)
	}
}

// settled reports whether the fleet is at its target: every role serves its target and no
// GPU is held by a draining pod.
func (a *actuator) settled() bool {
	if len(a.draining) > 0 {
		return false
	}
	for _, role := range []string{RolePrefill, RoleDecode} {
		if len(a.provisioning[role]) > 0 || len(a.active[role]) != a.target[role] {
			return false
		}
	}
	return true
}

// advice is the first advisor's desired replicas per role, when both roles have an estimate.
func (a *actuator) advice() (map[string]int, map[string]string, bool) {
	want, reasons := map[string]int{}, map[string]string{}
	for _, adv := range a.s.epps[0].advisors[0].ReplicaAdvice() {
		want[adv.Role], reasons[adv.Role] = adv.Replicas, adv.Reason
	}
	for _, role := range []string{RolePrefill, RoleDecode} {
		if want[role] <= 0 || reasons[role] == contract.ReasonNoData || reasons[role] == "" {
			return nil, nil, false
		}
	}
	return want, reasons, true
}

// splitBudget scales the desired replicas to fill budget in their ratio, one pod per role at
// least.
func splitBudget(budget, prefill, decode int) (int, int) {
	p := int(math.Round(float64(budget) * float64(prefill) / float64(prefill+decode)))
	p = min(max(p, 1), budget-1)
	return p, budget - p
}

// shrink takes a role down to its target: provisions are cancelled first, then the pods with
// the fewest routed requests leave the pool. It reports whether the pool changed.
func (a *actuator) shrink(role string) bool {
	over := len(a.active[role]) + len(a.provisioning[role]) - a.target[role]
	for over > 0 && len(a.provisioning[role]) > 0 {
		last := len(a.provisioning[role]) - 1
		a.provisioning[role][last].cancelled = true
		a.provisioning[role] = a.provisioning[role][:last]
		over--
	}
	if over <= 0 {
		return false
	}
	pods := a.active[role]
	sort.SliceStable(pods, func(i, j int) bool { return pods[i].assigned < pods[j].assigned })
	n := min(over, len(pods)-1)
	a.draining = append(a.draining, pods[:n]...)
	a.active[role] = append([]*pod(nil), pods[n:]...)
	return n > 0
}

// grow provisions pods for a role below its target, as far as free GPUs allow.
func (a *actuator) grow(role string) {
	short := a.target[role] - len(a.active[role]) - len(a.provisioning[role])
	for ; short > 0 && a.held() < a.cfg.Budget; short-- {
		pr := &provision{}
		a.provisioning[role] = append(a.provisioning[role], pr)
		a.s.clock.AfterFunc(a.cfg.Delay, func() { a.ready(role, pr) })
	}
}

// ready: a provisioned pod joins the pool (unless its provision was cancelled meanwhile).
func (a *actuator) ready(role string, pr *provision) {
	if pr.cancelled {
		return
	}
	now := a.s.now()
	a.account(now)
	for i, q := range a.provisioning[role] {
		if q == pr {
			a.provisioning[role] = append(a.provisioning[role][:i], a.provisioning[role][i+1:]...)
			break
		}
	}
	s := a.s
	spec := fleetPod(len(s.pods), role, s.cfg.Model)
	p, err := newPod(s, len(s.pods), spec, s.prof, s.cfg.KVPolicy)
	if err != nil {
		panic(fmt.Sprintf("actuator: a pod like the fleet's failed to build: %v", err))
	}
	s.pods = append(s.pods, p)
	s.byName[spec.Name], s.byAddr[spec.Addr()] = p, p
	s.res.perPod = append(s.res.perPod, podLoad{})
	p.scrape(now)
	a.active[role] = append(a.active[role], p)
	a.publish()
}

// publish makes the serving pods every EPP's pool.
func (a *actuator) publish() {
	pods := append(append([]*pod(nil), a.active[RolePrefill]...), a.active[RoleDecode]...)
	for _, e := range a.s.epps {
		e.pool.set(pods)
	}
}

// ActuatorSummary is what the actuator did in one run.
type ActuatorSummary struct {
	Events []ScaleEvent `json:"events"`
	// MeanGPUs is the mean number of GPUs held (serving, draining, provisioning).
	MeanGPUs float64 `json:"meanGpus"`
}

func (a *actuator) summary() ActuatorSummary {
	a.account(a.s.now())
	out := ActuatorSummary{Events: a.events}
	if d := a.s.now().Sub(a.s.start).Seconds(); d > 0 {
		out.MeanGPUs = a.usedSeconds / d
	}
	return out
}

// directionChanges counts, per phase of the given length, how often the prefill target
// turned from growing to shrinking or back (the decode target mirrors it under a fixed
// budget); a change counts in the phase it happens in. Changes after the last phase, while
// the fleet drains the requests still running, are not counted: nothing arrives any more.
func directionChanges(events []ScaleEvent, initialPrefill int, phase time.Duration, phases int) []int {
	out := make([]int, phases)
	prev, dir := initialPrefill, 0
	for _, e := range events {
		if e.AtSeconds >= float64(phases)*phase.Seconds() {
			break
		}
		d := 1
		if e.Prefill < prev {
			d = -1
		}
		if dir != 0 && d != dir {
			out[int(e.AtSeconds/phase.Seconds())]++
		}
		prev, dir = e.Prefill, d
	}
	return out
}
