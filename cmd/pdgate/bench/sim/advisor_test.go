package simbench

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestSplitBudget(t *testing.T) {
	tests := []struct {
		budget, prefill, decode int
		wantP, wantD            int
	}{
		{64, 1, 1, 32, 32},
		{64, 3, 1, 48, 16},
		{64, 10, 30, 16, 48},
		{64, 100, 1, 63, 1}, // a role keeps one pod
		{64, 1, 100, 1, 63},
		{16, 7, 5, 9, 7},
	}
	for _, tc := range tests {
		p, d := splitBudget(tc.budget, tc.prefill, tc.decode)
		if p != tc.wantP || d != tc.wantD {
			t.Errorf("splitBudget(%d, %d, %d) = %d:%d, want %d:%d", tc.budget, tc.prefill, tc.decode, p, d, tc.wantP, tc.wantD)
		}
	}
}

func TestDirectionChanges(t *testing.T) {
	ev := func(at float64, prefill int) ScaleEvent { return ScaleEvent{AtSeconds: at, Prefill: prefill} }
	tests := []struct {
		name   string
		events []ScaleEvent
		want   []int
	}{
		{name: "none", want: []int{0, 0}},
		{name: "one way", events: []ScaleEvent{ev(10, 20), ev(20, 24), ev(70, 30)}, want: []int{0, 0}},
		{name: "a turn in each phase", events: []ScaleEvent{ev(10, 20), ev(20, 14), ev(70, 30)}, want: []int{1, 1}},
		{name: "the first move is no change", events: []ScaleEvent{ev(10, 10)}, want: []int{0, 0}},
		{name: "flapping", events: []ScaleEvent{ev(1, 17), ev(2, 16), ev(3, 17), ev(4, 16)}, want: []int{3, 0}},
		{name: "the drain after the last phase does not count", events: []ScaleEvent{ev(10, 20), ev(130, 14)}, want: []int{0, 0}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := directionChanges(tc.events, 16, time.Minute, 2)
			if !slices.Equal(got, tc.want) {
				t.Fatalf("directionChanges = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestShiftingSource: each phase's arrivals come in its own slot of virtual time, in order,
// at its own rate.
func TestShiftingSource(t *testing.T) {
	prof := costmodel.Default()
	phases, err := NewShiftPhases([]string{WorkloadCode, WorkloadReasoning}, Traces{}, prof, 1)
	if err != nil {
		t.Fatal(err)
	}
	const every = 20 * time.Second
	src, err := NewShiftingSource(phases, Traces{}, 0.5, 8, every, 1)
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]int{}
	var last time.Duration
	for {
		a, ok := src.Next()
		if !ok {
			break
		}
		if a.At < last {
			t.Fatalf("arrival at %v after one at %v", a.At, last)
		}
		last = a.At
		want := phases[int(a.At/every)].Workload
		if a.Kind != want {
			t.Fatalf("a %s arrival at %v, in the %s phase", a.Kind, a.At, want)
		}
		counts[a.Kind]++
	}
	for _, ph := range phases {
		want := 0.5 * ph.CapacityPerGPU * 8 * every.Seconds()
		if got := float64(counts[ph.Workload]); got < 0.7*want || got > 1.3*want {
			t.Errorf("phase %s: %v arrivals, want about %.0f", ph.Workload, got, want)
		}
	}
}

// TestActuatorFollowsTheAdvisor runs a small fleet through a prefill-heavy then a
// decode-heavy phase: the actuator moves GPUs to prefill, then to decode, never holds more
// than the budget, and serves every request.
func TestActuatorFollowsTheAdvisor(t *testing.T) {
	if testing.Short() {
		t.Skip("a simulated minute and a half of traffic")
	}
	prof := costmodel.Default()
	phases, err := NewShiftPhases([]string{WorkloadCode, WorkloadReasoning}, Traces{}, prof, 1)
	if err != nil {
		t.Fatal(err)
	}
	// 12 GPUs: on fewer, one replica of the small advice moves the split by more than the
	// code phase's shift, and the actuator rightly waits (adviceResolution)
	const every, budget = 45 * time.Second, 12
	src, err := NewShiftingSource(phases, Traces{}, 0.6, budget, every, 1)
	if err != nil {
		t.Fatal(err)
	}
	o := AdvisorDefaults()
	o.Window, o.Interval, o.Dwell = 10*time.Second, 5*time.Second, 15*time.Second
	cfgPath, err := writeAdvisorConfig(repoFile(o.Policy), t.TempDir(), o, prof)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Profile: prof, Pods: pdFleet(budget/2, budget/2, prof.Model), EPPConfig: cfgPath, Source: src, Seed: 1, PrefillRelease: true,
		Actuator: &ActuatorConfig{Budget: budget, Delay: 5 * time.Second, Every: 5 * time.Second, Band: 1, Window: o.Window}})
	if err != nil {
		t.Fatal(err)
	}
	maxHeld := 0
	var watch func()
	watch = func() {
		maxHeld = max(maxHeld, s.act.held())
		if !s.srcDone || s.inflight > 0 {
			s.clock.AfterFunc(time.Second, watch)
		}
	}
	s.clock.AfterFunc(time.Second, watch)
	res, err := s.Run()
	if err != nil {
		t.Fatal(err)
	}
	if len(res.failed) > 0 {
		t.Errorf("failures: %v", res.failed)
	}
	if maxHeld > budget {
		t.Errorf("held %d GPUs, budget %d", maxHeld, budget)
	}
	sum := s.act.summary()
	peak, trough := 0, budget
	for _, e := range sum.Events {
		if e.Prefill+e.Decode != budget {
			t.Errorf("event %+v does not split the budget", e)
		}
		if e.AtSeconds < every.Seconds() {
			peak = max(peak, e.Prefill)
		} else {
			trough = min(trough, e.Prefill)
		}
	}
	if peak <= budget/2 || trough >= budget/2 {
		t.Errorf("prefill target peaked at %d in the code phase and fell to %d in the reasoning phase, want above and below %d (events %+v)", peak, trough, budget/2, sum.Events)
	}
	if len(s.pods) <= budget {
		t.Errorf("no pod was provisioned: %d pods", len(s.pods))
	}
}

// TestWriteAdvisorConfig: the policy plus pd-ratio-advisor; with --sheddable its
// forecast-admitter judges the run's SLO on the simulated engines (one, whatever the policy
// lists), without it the policy's own admission stays as it is.
func TestWriteAdvisorConfig(t *testing.T) {
	prof := costmodel.Default()
	for _, tc := range []struct {
		sheddable bool
		want      []string
		admitters int
	}{
		{want: []string{"ttft: 1s"}, admitters: 1},
		{sheddable: true, want: []string{"ttft: 2s", "tpot: 50ms", "kvCapacityTokens: 400000"}, admitters: 1},
	} {
		o := AdvisorDefaults()
		o.Sheddable = tc.sheddable
		path, err := writeAdvisorConfig(repoFile(o.Policy), t.TempDir(), o, prof)
		if err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range append(tc.want, "type: pd-ratio-advisor", "ttftMs: 2000", "tpotMs: 50", "minDwellSeconds: 120", "mixLookbackSeconds: 3600", "type: aibrix-pd-pair") {
			if !strings.Contains(string(b), want) {
				t.Errorf("sheddable %v: config lacks %q:\n%s", tc.sheddable, want, b)
			}
		}
		if n := strings.Count(string(b), "type: "+forecastAdmitterType); n != tc.admitters {
			t.Errorf("sheddable %v: %d forecast-admitters, want %d", tc.sheddable, n, tc.admitters)
		}
	}
	if _, err := writeAdvisorConfig(filepath.Join(t.TempDir(), "none.yaml"), t.TempDir(), AdvisorDefaults(), prof); err == nil {
		t.Error("a missing policy config was accepted")
	}
}

// TestSheddableKeepsTheKind: the advisor run's sheddable requests keep their workload kind
// (attainment per phase is keyed by it) and carry the sheddable objective and max_tokens.
func TestSheddableKeepsTheKind(t *testing.T) {
	src := sheddable{Source: &sliceSource{arrivals: []Arrival{{Kind: WorkloadCode, Output: 64, Body: &fwksched.LLMRequestBody{}}}}, maxTokens: true}
	a, ok := src.Next()
	if !ok {
		t.Fatal("no arrival")
	}
	if a.Kind != WorkloadCode || a.Headers[metadata.ObjectiveKey] != sheddableObjective {
		t.Fatalf("kind %q, objective %q: want %q, %q", a.Kind, a.Headers[metadata.ObjectiveKey], WorkloadCode, sheddableObjective)
	}
	if m, _ := a.Body.Payload.(fwksched.PayloadMap); m == nil || m["max_tokens"] != float64(64) {
		t.Fatalf("payload %v, want max_tokens 64", a.Body.Payload)
	}
}

// sliceSource hands out its arrivals in order.
type sliceSource struct{ arrivals []Arrival }

func (s *sliceSource) Next() (Arrival, bool) {
	if len(s.arrivals) == 0 {
		return Arrival{}, false
	}
	a := s.arrivals[0]
	s.arrivals = s.arrivals[1:]
	return a, true
}

func TestAdvisorOptionsValidate(t *testing.T) {
	tests := []struct {
		name string
		edit func(*AdvisorOptions)
		want string
	}{
		{name: "defaults", edit: func(*AdvisorOptions) {}},
		{name: "pods", edit: func(o *AdvisorOptions) { o.Pods = 1 }, want: "--pods"},
		{name: "no fleet", edit: func(o *AdvisorOptions) { o.Static, o.Advised = false, false }, want: "--advised=false"},
		{name: "ratio", edit: func(o *AdvisorOptions) { o.Ratios = []string{"1:x"} }, want: "--ratios"},
		{name: "no seeds", edit: func(o *AdvisorOptions) { o.Seeds = nil }, want: "--seeds"},
		{name: "phase length", edit: func(o *AdvisorOptions) { o.ShiftEvery = 0 }, want: "--shift-every"},
		{name: "window in seconds", edit: func(o *AdvisorOptions) { o.Window = 1500 * time.Millisecond }, want: "--advisor-window"},
		{name: "provisioning", edit: func(o *AdvisorOptions) { o.Provision = -time.Second }, want: "--provision-delay"},
		{name: "mix look-back", edit: func(o *AdvisorOptions) { o.MixLookback = -time.Second }, want: "--advisor-mix-lookback"},
		{name: "mix look-back in seconds", edit: func(o *AdvisorOptions) { o.MixLookback = 1500 * time.Millisecond }, want: "--advisor-mix-lookback"},
		{name: "parallel", edit: func(o *AdvisorOptions) { o.Parallel = 0 }, want: "--parallel"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := AdvisorDefaults()
			tc.edit(&o)
			plugintest.WantErr(t, o.Validate(), tc.want)
		})
	}
	if _, err := parseSeeds("1,x"); err == nil {
		t.Error("parseSeeds accepted x")
	}
	if got, err := parseSeeds("1, 2,3"); err != nil || len(got) != 3 {
		t.Errorf("parseSeeds = %v, %v", got, err)
	}
}
