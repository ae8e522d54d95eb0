package simbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/internal/commalist"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// AdvisorCell is the name of the advisor-driven fleet among the static ratios.
const AdvisorCell = "advisor"

// AdvisorOptions configure `pdgate bench sim advisor`: a fleet whose P:D ratio follows
// pd-ratio-advisor through the replica actuator, against static P:D ratios, on the shifting
// workload, at the same GPU budget.
type AdvisorOptions struct {
	Root, Out string
	Pods      int // the GPU budget of every fleet
	// Ratios are the static prefill:decode ratios compared ("1:2"); Static=false leaves them out.
	Ratios []string
	Static bool
	// Advised=false leaves the advisor-driven fleet out (static ratios only: the same runs
	// as an earlier invocation's, which is deterministic).
	Advised bool
	Seeds   []int64
	// Loads are offered loads, fractions of each phase's capacity estimate.
	Loads  []float64
	Phases []string
	// ShiftEvery is each phase's length in virtual time.
	ShiftEvery time.Duration
	// Provision is a new pod's provisioning delay; ActEvery how often the actuator reads the
	// advice.
	Provision, ActEvery time.Duration
	// The advisor's window, estimate interval and dwell.
	Window, Interval, Dwell time.Duration
	// MixLookback is how long the advisor remembers the heaviest mix for its per-role floor
	// (mixLookbackSeconds; 0: no floor).
	MixLookback time.Duration
	SLO         SLO
	// Sheddable makes every request sheddable (priority -1, with max_tokens) and sets the
	// config's forecast-admitter to the SLO, so an overload is shed instead of queued.
	Sheddable       bool
	Policy          string // the EndpointPickerConfig the fleets route with
	Profile         string
	Azure, Mooncake string
	Scrape          time.Duration
	// PrefillTimeout is the sidecars' prefill deadline (their --prefill-timeout, default
	// fallback-local policy); 0: none.
	PrefillTimeout time.Duration
	Parallel       int
	Stdout         io.Writer
}

// AdvisorDefaults are the settings: 64 GPUs, 10-minute phases, three seeds.
func AdvisorDefaults() AdvisorOptions {
	return AdvisorOptions{Root: ".", Out: "bench-results/advisor", Pods: 64, Static: true, Advised: true,
		Ratios: []string{"1:3", "1:2", "1:1", "2:1", "3:1"}, Seeds: []int64{1, 2, 3}, Loads: []float64{0.5, 0.7, 0.9, 1.1},
		Phases: DefaultShiftPhases, ShiftEvery: 10 * time.Minute, Provision: time.Minute, ActEvery: 10 * time.Second,
		Window: time.Minute, Interval: 10 * time.Second, Dwell: 2 * time.Minute, MixLookback: time.Hour,
		SLO:    SLO{TTFT: 2 * time.Second, TPOT: 50 * time.Millisecond},
		Policy: "config/recommended.yaml", Azure: workload.DefaultAzureConvPath, Mooncake: workload.DefaultMooncakePath,
		Scrape: 50 * time.Millisecond, PrefillTimeout: 30 * time.Second, Parallel: 2}
}

// NewAdvisorCommand is `pdgate bench sim advisor`.
func NewAdvisorCommand() *cobra.Command {
	o := AdvisorDefaults()
	var ratios, seeds, loads, phases string
	cmd := &cobra.Command{
		Use:   "advisor",
		Short: "P:D ratio advisor: a fleet scaled by pd-ratio-advisor against static P:D ratios on a shifting workload",
		Long: `Runs the virtual-time fleet on the shifting workload (each phase lasts --shift-every: the Azure
conversation trace, code with long prompts and short outputs, long-output reasoning, the Mooncake
trace), at each offered load (a fraction of each phase's capacity estimate), for every static
prefill:decode ratio and for a fleet whose ratio follows pd-ratio-advisor through the replica
actuator (roles scale after --provision-delay within the same GPU budget). Reports SLO attainment,
goodput per GPU at >= 90 % attainment and the actuator's scale-direction changes per phase.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctrllog.SetLogger(logr.Discard())
			var err error
			o.Ratios = commalist.Split(ratios)
			o.Phases = commalist.Split(phases)
			if o.Seeds, err = parseSeeds(seeds); err != nil {
				return err
			}
			if o.Loads, err = parseLoads(loads); err != nil {
				return err
			}
			o.Stdout = c.OutOrStdout()
			return RunAdvisor(c.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for advisor.json and advisor.md")
	f.IntVar(&o.Pods, "pods", o.Pods, "GPU budget of every fleet (prefill and decode pods together)")
	f.StringVar(&ratios, "ratios", strings.Join(o.Ratios, ","), "static prefill:decode ratios compared with the advisor-driven fleet")
	f.BoolVar(&o.Static, "static", o.Static, "run the static ratios (false: the advisor-driven fleet only)")
	f.BoolVar(&o.Advised, "advised", o.Advised, "run the advisor-driven fleet (false: the static ratios only)")
	f.StringVar(&seeds, "seeds", "1,2,3", "seeds (workload and EPP)")
	f.StringVar(&loads, "loads", "0.5,0.7,0.9,1.1", "offered loads as fractions of each phase's capacity estimate")
	f.StringVar(&phases, "phases", strings.Join(o.Phases, ","), "the shifting workload's phases, in order: azure-conv, code, reasoning, mooncake, sessions, rag")
	f.DurationVar(&o.ShiftEvery, "shift-every", o.ShiftEvery, "virtual time each phase lasts")
	f.DurationVar(&o.Provision, "provision-delay", o.Provision, "time from a free GPU to a new pod serving")
	f.DurationVar(&o.ActEvery, "actuate-every", o.ActEvery, "how often the actuator reads the advice")
	f.DurationVar(&o.Window, "advisor-window", o.Window, "the advisor's measurement window (windowSeconds)")
	f.DurationVar(&o.Interval, "advisor-interval", o.Interval, "the advisor's estimate interval (intervalSeconds)")
	f.DurationVar(&o.Dwell, "advisor-dwell", o.Dwell, "the advisor's minimum dwell (minDwellSeconds)")
	f.DurationVar(&o.MixLookback, "advisor-mix-lookback", o.MixLookback, "how long the advisor remembers the heaviest mix it served for its per-role floor (mixLookbackSeconds; 0 = no floor)")
	f.DurationVar(&o.SLO.TTFT, "slo-ttft", o.SLO.TTFT, "TTFT target (attainment, and the advisor's ttftMs)")
	f.DurationVar(&o.SLO.TPOT, "slo-tpot", o.SLO.TPOT, "TPOT target (attainment, and the advisor's tpotMs)")
	f.BoolVar(&o.Sheddable, "sheddable", o.Sheddable, "every request sheddable (priority -1, max_tokens set), forecast-admitter at the SLO's targets: what no placement serves in time is refused (429) and counts as missed")
	f.StringVar(&o.Policy, "policy-config", o.Policy, "EndpointPickerConfig every fleet routes with (pd-ratio-advisor is added to it)")
	fleetFlags(f, &o.Profile, &o.Scrape)
	f.StringVar(&o.Azure, "azure-conv", o.Azure, "Azure conversation trace CSV")
	f.StringVar(&o.Mooncake, "mooncake", o.Mooncake, "Mooncake trace JSONL")
	f.DurationVar(&o.PrefillTimeout, "prefill-timeout", o.PrefillTimeout, "the sidecars' prefill deadline (--prefill-timeout, fallback-local): a prefill leg not back by then is cancelled and the decode pod prefills; 0 = none")
	f.IntVar(&o.Parallel, "parallel", o.Parallel, "runs at once")
	return cmd
}

func parseSeeds(s string) ([]int64, error) {
	var out []int64
	for _, x := range commalist.Split(s) {
		v, err := strconv.ParseInt(x, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not an integer", x)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("--seeds: at least one")
	}
	return out, nil
}

// Validate checks the options; errors name the flag.
func (o AdvisorOptions) Validate() error {
	var errs []error
	if !o.Static && !o.Advised {
		errs = append(errs, errors.New("--static=false and --advised=false leave no fleet to run"))
	}
	if o.Pods < 2 {
		errs = append(errs, fmt.Errorf("--pods must be >= 2, got %d", o.Pods))
	}
	for _, r := range o.Ratios {
		if _, err := ParseShape("pd-" + r); err != nil {
			errs = append(errs, fmt.Errorf("--ratios: %w", err))
		}
	}
	if len(o.Seeds) == 0 || len(o.Loads) == 0 || len(o.Phases) == 0 {
		errs = append(errs, errors.New("--seeds, --loads and --phases need at least one value"))
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--shift-every", o.ShiftEvery}, {"--actuate-every", o.ActEvery}, {"--advisor-window", o.Window},
		{"--advisor-interval", o.Interval}, {"--slo-ttft", o.SLO.TTFT}, {"--slo-tpot", o.SLO.TPOT}, {"--scrape-interval", o.Scrape}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s must be > 0", d.flag))
		}
	}
	for _, d := range []struct {
		flag string
		v    time.Duration
	}{{"--advisor-window", o.Window}, {"--advisor-interval", o.Interval}, {"--advisor-dwell", o.Dwell}, {"--advisor-mix-lookback", o.MixLookback}} {
		if d.v%time.Second != 0 {
			errs = append(errs, fmt.Errorf("%s must be whole seconds, got %s", d.flag, d.v))
		}
	}
	if o.Provision < 0 || o.Dwell < 0 || o.PrefillTimeout < 0 || o.MixLookback < 0 {
		errs = append(errs, errors.New("--provision-delay, --advisor-dwell, --advisor-mix-lookback and --prefill-timeout must be >= 0"))
	}
	if o.Parallel < 1 {
		errs = append(errs, fmt.Errorf("--parallel must be >= 1, got %d", o.Parallel))
	}
	return errors.Join(errs...)
}

// AdvisorRun is one fleet at one load and seed.
type AdvisorRun struct {
	Cell       string  `json:"cell"`
	Seed       int64   `json:"seed"`
	Load       float64 `json:"load"`
	RatePerGPU float64 `json:"ratePerGpu"`
	Attainment float64 `json:"attainment"`
	// PhaseAttainment is the attainment per phase (workload kind).
	PhaseAttainment map[string]float64 `json:"phaseAttainment"`
	Requests        int                `json:"requests"`
	Failed          int                `json:"failed"`
	// PrefillFallbacks is the prefill legs past the prefill deadline, prefilled locally.
	PrefillFallbacks int  `json:"prefillFallbacks"`
	TTFT             Dist `json:"ttft"`
	TPOT             Dist `json:"tpot"`
	// Actuator and DirectionChanges (per phase) for the advisor-driven fleet.
	Actuator         *ActuatorSummary `json:"actuator,omitempty"`
	DirectionChanges []int            `json:"directionChanges,omitempty"`
	VirtualSeconds   float64          `json:"virtualSeconds"`
	WallSeconds      float64          `json:"wallSeconds"`
}

// AdvisorGoodput is one fleet's goodput per GPU for one seed.
type AdvisorGoodput struct {
	Cell    string         `json:"cell"`
	Seed    int64          `json:"seed"`
	Goodput report.MaxRate `json:"goodputPerGpu"`
}

// AdvisorData is advisor.json's data.
type AdvisorData struct {
	Options     AdvisorOptions   `json:"options"`
	Profile     string           `json:"profile"`
	Phases      []ShiftPhase     `json:"phases"`
	Config      string           `json:"config"`
	Runs        []AdvisorRun     `json:"runs"`
	Goodput     []AdvisorGoodput `json:"goodput"`
	WallSeconds float64          `json:"wallSeconds"`
}

// RunAdvisor is `pdgate bench sim advisor`.
func RunAdvisor(ctx context.Context, o AdvisorOptions) error {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if err := o.Validate(); err != nil {
		return err
	}
	w := o.Stdout
	paths := Options{Root: o.Root}
	prof, err := loadProfile(Options{Root: o.Root, Profile: o.Profile})
	if err != nil {
		return err
	}
	traces, err := LoadTraces(o.Phases, paths.path(o.Azure), paths.path(o.Mooncake))
	if err != nil {
		return err
	}
	phases, err := NewShiftPhases(o.Phases, traces, prof, o.Seeds[0])
	if err != nil {
		return err
	}
	for _, ph := range phases {
		fmt.Fprintf(w, "phase %-10s mean prompt %6.0f, mean output %5.0f tokens, capacity estimate %.2f req/s per GPU\n",
			ph.Workload, ph.MeanPrompt, ph.MeanOutput, ph.CapacityPerGPU)
	}
	dir := paths.path(o.Out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	cfgPath, err := writeAdvisorConfig(paths.path(o.Policy), dir, o, prof)
	if err != nil {
		return err
	}
	d := &AdvisorData{Options: o, Profile: prof.Name, Phases: phases, Config: cfgPath}
	var cells []string
	if o.Static {
		cells = append(cells, o.Ratios...)
	}
	if o.Advised {
		cells = append(cells, AdvisorCell)
	}
	type job struct {
		cell string
		seed int64
		load float64
	}
	var jobs []job
	for _, c := range cells {
		for _, seed := range o.Seeds {
			for _, load := range o.Loads {
				jobs = append(jobs, job{c, seed, load})
			}
		}
	}
	meanCap := MeanCapacityPerGPU(phases)
	printf := lockedPrintf(w)
	start := time.Now()
	runs, err := runJobs(ctx, o.Parallel, jobs, func(j job) (AdvisorRun, error) {
		r, err := advisorRun(o, prof, traces, phases, cfgPath, j.cell, j.seed, j.load)
		r.RatePerGPU = j.load * meanCap
		if err != nil {
			return r, err
		}
		var per []string
		for _, ph := range phases {
			per = append(per, fmt.Sprintf("%.2f", r.PhaseAttainment[ph.Workload]))
		}
		line := fmt.Sprintf("%-8s seed %d load %.2f (%.2f req/s/GPU): attainment %.3f (phases %s)  TTFT p50/p99 %.0f/%.0f ms  TPOT p50/p99 %.1f/%.1f ms  %d requests, %d not served, %d prefill fallbacks  run ends at %.0f s  wall %.0f s",
			r.Cell, r.Seed, r.Load, r.RatePerGPU, r.Attainment, strings.Join(per, "/"), r.TTFT.P50, r.TTFT.P99, r.TPOT.P50, r.TPOT.P99, r.Requests, r.Failed, r.PrefillFallbacks, r.VirtualSeconds, r.WallSeconds)
		if r.Actuator != nil {
			line += fmt.Sprintf("  scale events %d, direction changes per phase %v, mean GPUs %.1f", len(r.Actuator.Events), r.DirectionChanges, r.Actuator.MeanGPUs)
		}
		printf("%s\n", line)
		return r, nil
	})
	if err != nil {
		return err
	}
	d.Runs = runs
	d.Goodput = advisorGoodput(cells, o.Seeds, runs)
	d.WallSeconds = time.Since(start).Seconds()
	rep := buildAdvisorReport(d, cells)
	rep.Started = start.UTC()
	md, err := rep.Write(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d runs in %.0f s of wall time; report: %s\n", len(jobs), d.WallSeconds, md)
	return nil
}

// writeAdvisorConfig is the policy's EndpointPickerConfig with pd-ratio-advisor added (every
// fleet runs it, so routing is the same whether or not the actuator follows it).
func writeAdvisorConfig(policy, dir string, o AdvisorOptions, prof *costmodel.Profile) (string, error) {
	raw, err := os.ReadFile(policy)
	if err != nil {
		return "", fmt.Errorf("--policy-config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", fmt.Errorf("--policy-config %s: %w", policy, err)
	}
	plugins, _ := cfg["plugins"].([]any)
	if o.Sheddable {
		// the forecast judges the run's own SLO on the run's own engines
		plugins = append(withoutForecastAdmitter(plugins), forecastAdmitterPlugin(o.SLO, 0, prof))
	}
	cfg["plugins"] = append(plugins, map[string]any{"type": "pd-ratio-advisor", "parameters": map[string]any{
		"ttftMs": o.SLO.TTFT.Milliseconds(), "tpotMs": o.SLO.TPOT.Milliseconds(),
		"windowSeconds": int(o.Window.Seconds()), "intervalSeconds": int(o.Interval.Seconds()),
		"minDwellSeconds": int(o.Dwell.Seconds()), "mixLookbackSeconds": int(o.MixLookback.Seconds()),
	}})
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("advisor config: %w", err)
	}
	path := filepath.Join(dir, "advisor-epp.yaml")
	if err := os.WriteFile(path, out, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// pdFleet is prefill then decode pods with llm-d's role labels only: no AIBrix roleset, so
// every prefill pod pairs with every decode pod and a role can grow or shrink by one pod.
func pdFleet(prefill, decode int, model string) []PodSpec {
	out := make([]PodSpec, 0, prefill+decode)
	for i := range prefill + decode {
		role := RolePrefill
		if i >= prefill {
			role = RoleDecode
		}
		out = append(out, fleetPod(i, role, model))
	}
	return out
}

func advisorRun(o AdvisorOptions, prof *costmodel.Profile, traces Traces, phases []ShiftPhase, cfgPath, cell string, seed int64, load float64) (AdvisorRun, error) {
	out := AdvisorRun{Cell: cell, Seed: seed, Load: load}
	src, err := NewShiftingSource(phases, traces, load, o.Pods, o.ShiftEvery, seed)
	if err != nil {
		return out, err
	}
	ratio := cell
	if cell == AdvisorCell {
		ratio = "1:1" // the advisor-driven fleet starts even
	}
	shape, err := ParseShape("pd-" + ratio)
	if err != nil {
		return out, err
	}
	np, nd, _, err := shape.Counts(o.Pods)
	if err != nil {
		return out, err
	}
	cfg := Config{Profile: prof, Pods: pdFleet(np, nd, prof.Model), EPPConfig: cfgPath, Model: prof.Model, Source: src,
		Scrape: o.Scrape, Seed: seed, PrefillRelease: true, PrefillTimeout: o.PrefillTimeout}
	if o.Sheddable {
		cfg.Source = sheddable{Source: src, maxTokens: true}
	}
	if cell == AdvisorCell {
		cfg.Actuator = &ActuatorConfig{Budget: o.Pods, Delay: o.Provision, Every: o.ActEvery,
			Band: max(1, o.Pods/32), Window: o.Window, Hold: o.Dwell}
	}
	s, err := New(cfg)
	if err != nil {
		return out, fmt.Errorf("%s: %w", cell, err)
	}
	if o.Sheddable {
		registerSheddable(s)
	}
	res, err := s.Run()
	if err != nil {
		return out, fmt.Errorf("%s seed %d at load %.2f: %w", cell, seed, load, err)
	}
	out.Attainment, out.PhaseAttainment = res.Goodput(o.SLO), res.GoodputByKind(o.SLO)
	out.Requests, out.TTFT, out.TPOT = res.Summary.Requests, res.Summary.TTFT, res.Summary.TPOT
	out.PrefillFallbacks = res.Summary.PrefillFallbacks
	for _, n := range res.failed {
		out.Failed += n
	}
	out.VirtualSeconds, out.WallSeconds = res.Summary.VirtualSeconds, res.Summary.WallSeconds
	if s.act != nil {
		sum := s.act.summary()
		out.Actuator = &sum
		out.DirectionChanges = directionChanges(sum.Events, np, o.ShiftEvery, len(phases))
	}
	return out, nil
}

// advisorGoodput interpolates each fleet's goodput per GPU per seed over its loads.
func advisorGoodput(cells []string, seeds []int64, runs []AdvisorRun) []AdvisorGoodput {
	var out []AdvisorGoodput
	for _, c := range cells {
		for _, seed := range seeds {
			var pts []report.RatePoint
			for _, r := range runs {
				if r.Cell == c && r.Seed == seed {
					pts = append(pts, report.RatePoint{Rate: r.RatePerGPU, Attainment: r.Attainment})
				}
			}
			out = append(out, AdvisorGoodput{Cell: c, Seed: seed, Goodput: report.MaxRateAt(pts, report.GoodputTarget)})
		}
	}
	return out
}

// buildAdvisorReport: goodput per fleet (per seed and mean), against the best and the median
// static ratio, and the advisor-driven fleet's scale-direction changes per phase.
func buildAdvisorReport(d *AdvisorData, cells []string) *report.Report {
	o := d.Options
	rep := report.New("advisor", "P:D ratio advisor on a shifting workload (pdgate bench sim advisor)")
	rep.Data = d
	var names []string
	for _, ph := range d.Phases {
		names = append(names, fmt.Sprintf("%s (%.0f/%.0f tokens, %.2f req/s/GPU)", ph.Workload, ph.MeanPrompt, ph.MeanOutput, ph.CapacityPerGPU))
	}
	rep.Add(report.Section{Title: "How to read this",
		Text: fmt.Sprintf("%d simulated GPUs (cost profile %s) routed by %s plus pd-ratio-advisor. The workload shifts every %s: %s. "+
			"At load L each phase offers L × its capacity estimate. **Attainment** is the share of requests with TTFT ≤ %s and TPOT ≤ %s; "+
			"**goodput** is the highest mean request rate per GPU with attainment ≥ 90 %% (interpolated over the loads %v). "+
			"The advisor-driven fleet starts at 1:1 and splits its %d GPUs in the advised ratio; a pod provisions in %s, "+
			"the advisor estimates every %s over %s with a %s dwell. Static fleets use every ratio from the start.",
			o.Pods, d.Profile, o.Policy, o.ShiftEvery, strings.Join(names, ", "), o.SLO.TTFT, o.SLO.TPOT, o.Loads,
			o.Pods, o.Provision, o.Interval, o.Window, o.Dwell) + sheddableNote(o.Sheddable)})
	t := report.Table{Title: "Goodput per GPU at ≥ 90 % attainment", Columns: []string{"fleet"}}
	for _, seed := range o.Seeds {
		t.Columns = append(t.Columns, fmt.Sprintf("seed %d", seed))
	}
	t.Columns = append(t.Columns, "mean")
	means := map[string]float64{}
	for _, c := range cells {
		row := []string{c}
		var sum float64
		for _, g := range d.Goodput {
			if g.Cell == c {
				row = append(row, g.Goodput.String())
				sum += g.Goodput.Value()
			}
		}
		means[c] = sum / float64(len(o.Seeds))
		t.Rows = append(t.Rows, append(row, report.F(means[c], 2)))
	}
	sec := report.Section{Title: "Goodput", Tables: []report.Table{t}}
	if len(cells) > 1 && o.Advised {
		var static []float64
		for _, c := range cells {
			if c != AdvisorCell {
				static = append(static, means[c])
			}
		}
		sort.Float64s(static)
		best, median := static[len(static)-1], static[len(static)/2]
		if len(static)%2 == 0 {
			median = (static[len(static)/2-1] + static[len(static)/2]) / 2
		}
		adv := means[AdvisorCell]
		sec.Text = fmt.Sprintf("Advisor-driven fleet: %.2f req/s per GPU; best static ratio %.2f (advisor %+.1f %%), median static ratio %.2f (advisor %+.1f %%).",
			adv, best, 100*(adv/best-1), median, 100*(adv/median-1))
	}
	rep.Add(sec)
	ch := report.Table{Title: "Advisor-driven fleet: scale-direction changes per phase, scale events, mean GPUs held",
		Columns: []string{"seed", "load", "attainment", "direction changes per phase", "scale events", "mean GPUs", "final P:D"}}
	for _, r := range d.Runs {
		if r.Actuator == nil {
			continue
		}
		final := "—"
		if n := len(r.Actuator.Events); n > 0 {
			e := r.Actuator.Events[n-1]
			final = fmt.Sprintf("%d:%d", e.Prefill, e.Decode)
		}
		var pc []string
		for _, n := range r.DirectionChanges {
			pc = append(pc, strconv.Itoa(n))
		}
		ch.Rows = append(ch.Rows, []string{strconv.FormatInt(r.Seed, 10), report.F(r.Load, 2), report.F(r.Attainment, 3),
			strings.Join(pc, " / "), strconv.Itoa(len(r.Actuator.Events)), report.F(r.Actuator.MeanGPUs, 1), final})
	}
	rep.Add(report.Section{Title: "Actuator", Tables: []report.Table{ch}})
	at := report.Table{Title: "Attainment per fleet and load (mean over seeds)", Columns: []string{"fleet"}}
	for _, l := range o.Loads {
		at.Columns = append(at.Columns, fmt.Sprintf("load %.2f", l))
	}
	for _, c := range cells {
		row := []string{c}
		for _, l := range o.Loads {
			var sum float64
			var n int
			for _, r := range d.Runs {
				if r.Cell == c && r.Load == l {
					sum += r.Attainment
					n++
				}
			}
			row = append(row, report.F(sum/math.Max(float64(n), 1), 3))
		}
		at.Rows = append(at.Rows, row)
	}
	rep.Add(report.Section{Title: "Attainment", Tables: []report.Table{at}})
	return rep
}
