package simbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/internal/commalist"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// forecastAdmitterType is the forecast admission plugin's type as configs name it; the bench
// edits configs, and binaries reach plugins only through their configs (hack/pluginimports).
const forecastAdmitterType = "forecast-admitter"

// The two admissions `bench sim overload` compares.
const (
	AdmissionGate     = "gate"     // the EPP's legacy max(S_prefill, S_decode) saturation gate
	AdmissionForecast = "forecast" // forecast-admitter (the gate replaced)
)

// sheddableObjective is the InferenceObjective every overload request names: priority -1, so
// both admissions may shed it (neither sheds a critical request).
const sheddableObjective = "overload-sheddable"

// OverloadOptions configure `pdgate bench sim overload`: bursts at a multiple of the fleet's
// capacity, prefill-heavy then decode-heavy, under today's saturation gate and under
// forecast-admitter, in the same runs (same workload, seed and fleet).
type OverloadOptions struct {
	Root, Out string
	Pods      int
	Shape     string
	// Config is the EndpointPickerConfig both admissions route with: the gate run without any
	// forecast-admitter it lists, the forecast run with one (the SLO's targets and the engines'
	// cost profile).
	Config string
	Seeds  []int64
	// Load is the bursts' offered load as a multiple of each phase's capacity estimate; each
	// phase lasts Burst.
	Load     float64
	Burst    time.Duration
	Phases   []string
	SLO      SLO
	Headroom float64
	// MaxTokens has every request carry max_tokens = the output the engine will generate, as
	// clients that bound their output do (the forecast reads it; the gate does not).
	MaxTokens bool
	Profile   string
	Scrape    time.Duration
	Parallel  int
	Stdout    io.Writer `json:"-"`
}

// OverloadDefaults are the settings: 2x capacity, code (prefill-heavy) then reasoning
// (decode-heavy), three seeds.
func OverloadDefaults() OverloadOptions {
	return OverloadOptions{Root: ".", Out: "bench-results/overload", Pods: 16, Shape: "pd", Config: "config/recommended.yaml",
		Seeds: []int64{1, 2, 3}, Load: 2, Burst: 30 * time.Second, Phases: []string{WorkloadCode, WorkloadReasoning},
		SLO: SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}, Headroom: 0.8, MaxTokens: true, Scrape: 50 * time.Millisecond, Parallel: 2}
}

// NewOverloadCommand is `pdgate bench sim overload`.
func NewOverloadCommand() *cobra.Command {
	o := OverloadDefaults()
	var seeds, phases string
	cmd := &cobra.Command{
		Use:   "overload",
		Short: "Admission under overload: the saturation gate against forecast-admitter, 2x-capacity bursts, prefill-heavy then decode-heavy",
		Long: `Offers each phase (default: code, long prompts and short outputs; then reasoning, short prompts
and long outputs) for --burst of virtual time at --load times its capacity estimate, every
request sheddable (an InferenceObjective of priority -1), and runs the same workload twice per
seed: with --config as it is (the EPP's legacy max(S_prefill, S_decode) saturation gate) and
with forecast-admitter added (targets = --slo-ttft/--slo-tpot, cost = the engines' profile).
Reports, per seed and phase, the requests admitted, the share of admitted requests that missed
the SLO, and goodput (requests served within the SLO per second per GPU).`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctrllog.SetLogger(logr.Discard())
			var err error
			if o.Seeds, err = parseSeeds(seeds); err != nil {
				return err
			}
			o.Phases = commalist.Split(phases)
			o.Stdout = c.OutOrStdout()
			return RunOverload(c.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for overload.json, overload.md and the two EPP configs")
	f.IntVar(&o.Pods, "pods", o.Pods, "simulated GPUs")
	f.StringVar(&o.Shape, "shape", o.Shape, "fleet shape: pd, pd-P:D, hybrid, hybrid-P:D:C")
	f.StringVar(&o.Config, "config", o.Config, "EndpointPickerConfig both admissions route with")
	f.StringVar(&seeds, "seeds", "1,2,3", "seeds (workload and EPP)")
	f.Float64Var(&o.Load, "load", o.Load, "offered load of each burst, as a multiple of the phase's capacity estimate")
	f.DurationVar(&o.Burst, "burst", o.Burst, "virtual time each phase's burst lasts")
	f.StringVar(&phases, "phases", strings.Join(o.Phases, ","), "the bursts' workloads, in order: code, reasoning, azure-conv, mooncake, sessions, rag")
	f.DurationVar(&o.SLO.TTFT, "slo-ttft", o.SLO.TTFT, "TTFT objective (attainment, and forecast-admitter's ttft)")
	f.DurationVar(&o.SLO.TPOT, "slo-tpot", o.SLO.TPOT, "TPOT objective (attainment, and forecast-admitter's tpot)")
	f.Float64Var(&o.Headroom, "headroom", o.Headroom, "forecast-admitter's headroom (share of each target a forecast may take)")
	f.BoolVar(&o.MaxTokens, "max-tokens", o.MaxTokens, "requests carry max_tokens = their output length (false: the EPP knows no output length)")
	fleetFlags(f, &o.Profile, &o.Scrape)
	f.IntVar(&o.Parallel, "parallel", o.Parallel, "runs at once")
	return cmd
}

// OverloadRun is one admission on one seed.
type OverloadRun struct {
	Seed      int64          `json:"seed"`
	Admission string         `json:"admission"`
	Phases    []OverloadCell `json:"phases"` // per phase, then the whole run
	Answers   map[string]int `json:"answers"`
	NotServed int            `json:"notServed"` // refused or failed
	Wall      float64        `json:"wallSeconds"`
}

// OverloadCell is one phase's (or the whole run's) outcome.
type OverloadCell struct {
	Phase    string `json:"phase"`
	Sent     int    `json:"sent"`
	Admitted int    `json:"admitted"` // served: sent less the EPP's refusals and failures
	Good     int    `json:"good"`     // served within the SLO
	// LateTTFT and LateTPOT count the admitted requests over each target (one may be over both).
	LateTTFT int `json:"lateTtft"`
	LateTPOT int `json:"lateTpot"`
	// MissPct is the share of admitted requests that missed the SLO; Goodput is good requests
	// per second of burst per GPU.
	MissPct float64 `json:"missPct"`
	Goodput float64 `json:"goodputPerGpu"`
}

// OverloadData is overload.json.
type OverloadData struct {
	Options     OverloadOptions `json:"options"`
	Profile     string          `json:"profile"`
	PhaseRates  []float64       `json:"phaseRatesPerGpu"`
	Runs        []OverloadRun   `json:"runs"`
	WallSeconds float64         `json:"wallSeconds"`
}

// RunOverload is `pdgate bench sim overload`.
func RunOverload(ctx context.Context, o OverloadOptions) error {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Pods < 2 || len(o.Seeds) == 0 || !(o.Load > 0) || o.Burst <= 0 || len(o.Phases) == 0 || o.Parallel < 1 ||
		o.SLO.TTFT <= 0 || o.SLO.TPOT <= 0 || !(o.Headroom > 0 && o.Headroom <= 1) {
		return errors.New("bench sim overload: need --pods >= 2, --seeds, --load > 0, --burst > 0, --phases, --parallel >= 1, --slo-ttft and --slo-tpot > 0, --headroom in (0, 1]")
	}
	shape, err := ParseShape(o.Shape)
	if err != nil || shape.IsCombined() {
		return fmt.Errorf("--shape %q: want a P/D or hybrid shape", o.Shape)
	}
	prof, err := loadProfile(Options{Root: o.Root, Profile: o.Profile})
	if err != nil {
		return err
	}
	phases, err := NewShiftPhases(o.Phases, Traces{}, prof, 1)
	if err != nil {
		return err
	}
	dir := Options{Root: o.Root}.path(o.Out)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	gate, forecast, err := writeAdmissionConfigs(Options{Root: o.Root}.path(o.Config), dir, o, prof)
	if err != nil {
		return err
	}
	w := o.Stdout
	d := &OverloadData{Options: o, Profile: prof.Name}
	for _, ph := range phases {
		d.PhaseRates = append(d.PhaseRates, o.Load*ph.CapacityPerGPU)
		fmt.Fprintf(w, "burst %s: mean prompt %.0f, mean output %.0f tokens; capacity %.3f req/s per GPU, offered %.3f for %v\n",
			ph.Workload, ph.MeanPrompt, ph.MeanOutput, ph.CapacityPerGPU, o.Load*ph.CapacityPerGPU, o.Burst)
	}
	type job struct {
		seed      int64
		admission string
		config    string
	}
	var jobs []job
	for _, seed := range o.Seeds {
		jobs = append(jobs, job{seed, AdmissionGate, gate}, job{seed, AdmissionForecast, forecast})
	}
	printf := lockedPrintf(w)
	start := time.Now()
	runs, runErr := runJobs(ctx, o.Parallel, jobs, func(j job) (OverloadRun, error) {
		r, err := overloadRun(o, prof, phases, shape, j.config, j.seed)
		r.Seed, r.Admission = j.seed, j.admission
		if err != nil {
			printf("seed %d %s: FAILED: %v\n", j.seed, j.admission, err)
			return r, err
		}
		// one line per phase, then the whole run: the goal holds per phase, not only on average
		var b strings.Builder
		for _, c := range r.Phases {
			fmt.Fprintf(&b, "seed %d %-8s %-10s admitted %5d of %5d, missed SLO %6.2f %% of admitted (late TTFT %d, TPOT %d), goodput %.3f req/s per GPU\n",
				j.seed, j.admission, c.Phase, c.Admitted, c.Sent, c.MissPct, c.LateTTFT, c.LateTPOT, c.Goodput)
		}
		printf("%s", b.String())
		return r, nil
	})
	if ctx.Err() != nil {
		return runErr
	}
	d.Runs = runs
	d.WallSeconds = time.Since(start).Seconds()
	md, err := writeOverloadReport(dir, d, start)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "%d runs in %.0f s of wall time; report: %s\n", len(jobs), d.WallSeconds, md)
	return runErr
}

// overloadRun runs one admission config on one seed's bursts.
func overloadRun(o OverloadOptions, prof *costmodel.Profile, phases []ShiftPhase, shape Shape, config string, seed int64) (OverloadRun, error) {
	src, err := NewShiftingSource(phases, Traces{}, o.Load, o.Pods, o.Burst, seed)
	if err != nil {
		return OverloadRun{}, err
	}
	pods, err := shape.Layout(o.Pods, prof.Model)
	if err != nil {
		return OverloadRun{}, err
	}
	s, err := New(Config{Profile: prof, Pods: pods, EPPConfig: config, Model: prof.Model, Source: sheddable{Source: src, phases: phases, burst: o.Burst, maxTokens: o.MaxTokens},
		Scrape: o.Scrape, Seed: seed, PrefillRelease: true})
	if err != nil {
		return OverloadRun{}, err
	}
	registerSheddable(s)
	wall := time.Now()
	res, err := s.Run()
	if err != nil {
		return OverloadRun{}, err
	}
	r := OverloadRun{Answers: res.Summary.EPPAnswers, Wall: time.Since(wall).Seconds()}
	for _, n := range res.failed {
		r.NotServed += n
	}
	total := OverloadCell{Phase: "all"}
	for i, ph := range phases {
		kind := phaseKind(i, ph.Workload)
		c := OverloadCell{Phase: ph.Workload, Sent: res.sentByKind[kind]}
		countServed(res, kind, o.SLO, &c)
		c.finish(o.Burst, o.Pods)
		total.Sent, total.Admitted, total.Good = total.Sent+c.Sent, total.Admitted+c.Admitted, total.Good+c.Good
		total.LateTTFT, total.LateTPOT = total.LateTTFT+c.LateTTFT, total.LateTPOT+c.LateTPOT
		r.Phases = append(r.Phases, c)
	}
	total.finish(time.Duration(len(phases))*o.Burst, o.Pods)
	r.Phases = append(r.Phases, total)
	return r, nil
}

// phaseKind is the Arrival.Kind the run gives phase i's requests (sheddable): a phase's own
// kind may be another's (two bursts of one workload), its position is not.
func phaseKind(i int, workload string) string { return fmt.Sprintf("%d:%s", i+1, workload) }

// countServed counts the served requests of one kind, and those within the SLO.
func countServed(res *Result, kind string, slo SLO, c *OverloadCell) {
	for i := range res.ttft {
		if res.kinds[i] != kind {
			continue
		}
		c.Admitted++
		okTPOT := math.IsNaN(res.tpot[i]) || res.tpot[i] <= ms(slo.TPOT)
		okTTFT := res.ttft[i] <= ms(slo.TTFT)
		switch {
		case okTTFT && okTPOT:
			c.Good++
		case !okTTFT && !okTPOT:
			c.LateTTFT, c.LateTPOT = c.LateTTFT+1, c.LateTPOT+1
		case !okTTFT:
			c.LateTTFT++
		default:
			c.LateTPOT++
		}
	}
}

func (c *OverloadCell) finish(span time.Duration, gpus int) {
	if c.Admitted > 0 {
		c.MissPct = 100 * float64(c.Admitted-c.Good) / float64(c.Admitted)
	}
	c.Goodput = float64(c.Good) / span.Seconds() / float64(gpus)
}

// sheddable names the sheddable objective on every request and, given phases, marks it with
// its phase (each lasting burst).
type sheddable struct {
	Source
	phases    []ShiftPhase
	burst     time.Duration
	maxTokens bool
}

func (s sheddable) Next() (Arrival, bool) {
	a, ok := s.Source.Next()
	if !ok {
		return a, false
	}
	h := make(map[string]string, len(a.Headers)+1)
	for k, v := range a.Headers {
		h[k] = v
	}
	h[metadata.ObjectiveKey] = sheddableObjective
	a.Headers = h
	if len(s.phases) > 0 {
		i := min(int(a.At/s.burst), len(s.phases)-1)
		a.Kind = phaseKind(i, s.phases[i].Workload)
	}
	if s.maxTokens && a.Body != nil && a.Body.Payload == nil {
		body := *a.Body
		body.Payload = fwksched.PayloadMap{"max_tokens": float64(a.Output)}
		a.Body = &body
	}
	return a, true
}

// writeAdmissionConfigs writes the two EndpointPickerConfigs compared: the config without any
// forecast-admitter (the saturation gate decides), and with one whose targets are the SLO's and
// whose cost profile is the engines' own.
func writeAdmissionConfigs(base, dir string, o OverloadOptions, prof *costmodel.Profile) (gate, forecast string, err error) {
	raw, err := os.ReadFile(base)
	if err != nil {
		return "", "", fmt.Errorf("--config: %w", err)
	}
	var cfg map[string]any
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return "", "", fmt.Errorf("--config %s: %w", base, err)
	}
	listed, _ := cfg["plugins"].([]any)
	plugins := withoutForecastAdmitter(listed)
	write := func(name string) (string, error) {
		out, err := yaml.Marshal(cfg)
		if err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, out, 0o644); err != nil {
			return "", fmt.Errorf("%s: %w", name, err)
		}
		return path, nil
	}
	cfg["plugins"] = plugins
	if gate, err = write("gate-epp.yaml"); err != nil {
		return "", "", err
	}
	cfg["plugins"] = append(plugins, forecastAdmitterPlugin(o.SLO, o.Headroom, prof))
	if forecast, err = write("forecast-epp.yaml"); err != nil {
		return "", "", err
	}
	return gate, forecast, nil
}
