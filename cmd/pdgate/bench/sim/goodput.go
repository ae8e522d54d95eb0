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

	"github.com/pdgate/pdgate/cmd/internal/commalist"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// GoodputOptions configure `pdgate bench sim goodput`: SLO attainment against request rate
// and the highest rate per GPU with ≥ 90 % attainment (DistServe's goodput), per workload,
// fleet shape and policy, at equal GPU count.
type GoodputOptions struct {
	Root     string
	Out      string
	Quick    bool
	Pods     int
	Requests int // at least this many per rate point
	// Duration is the virtual time each rate point's arrivals span at least (requests =
	// max(Requests, rate × pods × Duration)): a queue that grows at an overload needs time to.
	Duration  time.Duration
	Workloads []string
	Cells     string // "shape/policy,..."; policy "*" = every P/D policy
	Profile   string
	Azure     string
	// Mooncake is the Mooncake trace the mooncake workload replays.
	Mooncake string
	Seed     int64
	// SLOs, when set, replace the derived interactive and relaxed SLOs for every workload.
	SLOs []report.SLO
	// Multipliers of the derived SLOs: TTFT = x × the unloaded prefill time of the workload's
	// median prompt, TPOT = x × the unloaded decode step (batch 1).
	InteractiveTTFTx, InteractiveTPOTx float64
	RelaxedTTFTx, RelaxedTPOTx         float64
	// Fractions are the sweep's rates as fractions of the workload's estimated capacity per
	// GPU; Extend bounds the extra points added above or below when the crossing lies outside.
	Fractions []float64
	Extend    int
	// Refine bisects each SLO's crossing that many times after the sweep.
	Refine   int
	Target   float64
	Scrape   time.Duration
	Parallel int
	Stdout   io.Writer
}

// GoodputDefaults are the full run's settings.
func GoodputDefaults() GoodputOptions {
	return GoodputOptions{Root: ".", Out: "bench-results/goodput", Pods: 64, Requests: 1000, Duration: 20 * time.Second,
		Workloads: []string{WorkloadAzure, WorkloadSessions, WorkloadRAG}, Cells: DefaultGoodputCells,
		Azure: workload.DefaultAzureConvPath, Mooncake: workload.DefaultMooncakePath, Seed: 1,
		InteractiveTTFTx: 5, InteractiveTPOTx: 1.5, RelaxedTTFTx: 25, RelaxedTPOTx: 7,
		Fractions: []float64{0.25, 0.5, 0.75, 1.0, 1.5, 2.0}, Extend: 3, Refine: 1, Target: report.GoodputTarget,
		Scrape: 50 * time.Millisecond, Parallel: 2}
}

// DefaultGoodputCells: every policy on the 1:1 P/D fleet and on the hybrid fleet, the
// combined-only fleet under least-request, and the recommended policy on other P:D ratios.
const DefaultGoodputCells = "combined/least-request-combined,pd/*,hybrid/*,pd-2:1/recommended,pd-1:2/recommended"

// GoodputPolicies are the policies compared; "recommended" is config/recommended.yaml.
func GoodputPolicies(root string) []Policy {
	return []Policy{
		leastRequestCombined.describedAs("AIBrix least-request over whole requests (combined-only fleets)"),
		leastRequest.describedAs("AIBrix pd, least_request prefill and decode"),
		llmdPD.describedAs("llm-d's P/D sample: prefix-based decider, queue + prefix-cache scorers"),
		{Name: "aibrix-prefix-cache", Config: "config/aibrix-pd.yaml", Fleet: FleetKindPD,
			About: "AIBrix's default pd: prefix_cache prefill, load_balancing decode, fast paths, rate cap"},
		{Name: "aibrix-token-load", Config: "config/bench/routing/token-load.yaml", Fleet: FleetKindPD,
			About: "AIBrix pd, token_load prefill and decode (pd-token-ledger)"},
		recommended.describedAs("pdgate's recommended config (" + recommended.Config + ")"),
	}
}

// Cell is one fleet shape under one policy.
type Cell struct {
	Shape  Shape
	Policy Policy
}

// Name is "pd-1:1/recommended".
func (c Cell) Name() string { return c.Shape.Name + "/" + c.Policy.Name }

// ParseCells reads "shape/policy,..." ("*" = every P/D policy; combined shapes take
// combined policies, the others P/D policies).
func ParseCells(spec string, policies []Policy) ([]Cell, error) {
	var out []Cell
	seen := map[string]bool{}
	for _, item := range commalist.Split(spec) {
		sh, pol, ok := strings.Cut(item, "/")
		if !ok {
			return nil, fmt.Errorf("--cells: %q is not shape/policy", item)
		}
		shape, err := ParseShape(sh)
		if err != nil {
			return nil, fmt.Errorf("--cells: %w", err)
		}
		kind := FleetKindPD
		if shape.IsCombined() {
			kind = FleetKindCombined
		}
		candidates := policies
		if name, file, own := strings.Cut(pol, "="); own {
			if name == "" || file == "" {
				return nil, fmt.Errorf("--cells: %q: want shape/NAME=FILE for an EndpointPickerConfig of your own", item)
			}
			candidates = []Policy{{Name: name, Config: file, Fleet: kind, About: "EndpointPickerConfig " + file}}
			pol = name
		}
		matched := false
		for _, p := range candidates {
			if (pol == "*" && p.Fleet == kind) || p.Name == pol {
				if p.Fleet != kind {
					return nil, fmt.Errorf("--cells: policy %s routes %s fleets, not shape %s", p.Name, p.Fleet, shape.Name)
				}
				c := Cell{Shape: shape, Policy: p}
				if !seen[c.Name()] {
					seen[c.Name()] = true
					out = append(out, c)
				}
				matched = true
			}
		}
		if !matched {
			return nil, fmt.Errorf("--cells: no policy %q for shape %s", pol, shape.Name)
		}
	}
	if len(out) == 0 {
		return nil, errors.New("--cells: none")
	}
	return out, nil
}

// UnloadedPrefill is the engine time of a lone prompt of n tokens: every chunked-prefill step
// pays the step overhead.
func UnloadedPrefill(p *costmodel.Profile, n int) time.Duration {
	chunk := p.ChunkedPrefillTokens
	if chunk <= 0 {
		chunk = n
	}
	steps := (n + chunk - 1) / max(chunk, 1)
	return time.Duration(steps)*p.PrefillOverhead() + p.PrefillSpan(0, n)
}

// DeriveSLOs are a workload's interactive and relaxed SLOs from the cost profile: TTFT a
// multiple of the unloaded prefill of its median prompt (rounded up to 10 ms), TPOT a multiple
// of the unloaded decode step at batch 1 with the median prompt plus half the mean output
// resident (rounded up to 0.5 ms).
func (o GoodputOptions) DeriveSLOs(p *costmodel.Profile, st WorkloadStats) []report.SLO {
	if len(o.SLOs) > 0 {
		return o.SLOs
	}
	prefill := UnloadedPrefill(p, int(st.MedianPrompt))
	step := p.DecodeStep(1, int(st.MedianPrompt+st.MeanOutput/2))
	roundUp := func(d time.Duration, to time.Duration) time.Duration { return (d + to - 1) / to * to }
	mk := func(name string, tx, px float64) report.SLO {
		return report.SLO{Name: name, TTFT: roundUp(time.Duration(tx*float64(prefill)), 10*time.Millisecond),
			TPOT: roundUp(time.Duration(px*float64(step)), 500*time.Microsecond)}
	}
	return []report.SLO{mk("interactive", o.InteractiveTTFTx, o.InteractiveTPOTx), mk("relaxed", o.RelaxedTTFTx, o.RelaxedTPOTx)}
}

// NewGoodputCommand is `pdgate bench sim goodput`.
func NewGoodputCommand() *cobra.Command {
	o := GoodputDefaults()
	var workloads, slos, fractions string
	cmd := &cobra.Command{
		Use:   "goodput",
		Short: "Goodput per GPU under latency SLOs (DistServe): SLO attainment vs request rate per workload, fleet shape and policy",
		Long: `For each workload (Azure conversation trace, multi-turn sessions over shared system prompts,
long-context RAG), each fleet shape at the same GPU count (combined-only, P/D at several
ratios, hybrid P/D + combined) and each routing policy, runs the virtual-time fleet at a sweep
of request rates and reports the share of requests meeting both the TTFT and the TPOT target
(SLO attainment) for an interactive and a relaxed SLO derived from the cost profile, and the
highest request rate per GPU with >= 90 % attainment (interpolated at the first crossing).
--quick: 10 s of virtual time per rate point instead of 20 s.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctrllog.SetLogger(logr.Discard())
			if o.Quick && !c.Flags().Changed("duration") {
				o.Duration = 10 * time.Second
			}
			o.Workloads = commalist.Split(workloads)
			if slos != "" {
				s, err := report.ParseSLOs(slos)
				if err != nil {
					return fmt.Errorf("--slos: %w", err)
				}
				o.SLOs = s
			}
			fs, err := parseFractions(fractions)
			if err != nil {
				return err
			}
			o.Fractions = fs
			o.Stdout = c.OutOrStdout()
			return RunGoodput(c.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for goodput.json, goodput.md and the PNG plots")
	f.BoolVar(&o.Quick, "quick", false, "10 s of virtual time per rate point")
	f.IntVar(&o.Pods, "pods", o.Pods, "simulated GPUs in every fleet")
	f.IntVar(&o.Requests, "requests", o.Requests, "at least this many requests per rate point")
	f.DurationVar(&o.Duration, "duration", o.Duration, "virtual time the arrivals of each rate point span at least")
	f.StringVar(&workloads, "workloads", strings.Join(o.Workloads, ","), "comma list: azure-conv, sessions, rag, mooncake")
	f.StringVar(&o.Cells, "cells", o.Cells, "comma list of shape/policy; shapes combined, pd, hybrid, pd-P:D, hybrid-P:D:C; policy * = every P/D policy, NAME=FILE an EndpointPickerConfig of your own")
	f.StringVar(&slos, "slos", "", "explicit SLOs for every workload, name=TTFT/TPOT,... (default: interactive and relaxed derived per workload)")
	f.Float64Var(&o.InteractiveTTFTx, "interactive-ttft-x", o.InteractiveTTFTx, "interactive TTFT = x × unloaded prefill of the median prompt")
	f.Float64Var(&o.InteractiveTPOTx, "interactive-tpot-x", o.InteractiveTPOTx, "interactive TPOT = x × unloaded decode step")
	f.Float64Var(&o.RelaxedTTFTx, "relaxed-ttft-x", o.RelaxedTTFTx, "relaxed TTFT = x × unloaded prefill of the median prompt")
	f.Float64Var(&o.RelaxedTPOTx, "relaxed-tpot-x", o.RelaxedTPOTx, "relaxed TPOT = x × unloaded decode step")
	f.StringVar(&fractions, "rates", "0.25,0.5,0.75,1,1.5,2", "sweep rates as fractions of the workload's estimated capacity per GPU")
	f.IntVar(&o.Extend, "extend", o.Extend, "extra rate points above (×1.5) or below (÷2) the sweep when the 90 % crossing lies outside it")
	f.IntVar(&o.Refine, "refine", o.Refine, "bisection steps per SLO between the two rate points around its 90 % crossing")
	f.Float64Var(&o.Target, "target", o.Target, "attainment that defines goodput")
	fleetFlags(f, &o.Profile, &o.Scrape)
	f.StringVar(&o.Azure, "azure-conv", o.Azure, "Azure conversation trace CSV")
	f.StringVar(&o.Mooncake, "mooncake", o.Mooncake, "Mooncake trace JSONL (the mooncake workload)")
	f.Int64Var(&o.Seed, "seed", o.Seed, "workload seed")
	f.IntVar(&o.Parallel, "parallel", o.Parallel, "cells swept at once")
	return cmd
}

func parseFractions(s string) ([]float64, error) {
	var out []float64
	for _, x := range commalist.Split(s) {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || !(v > 0) || v > 10 {
			return nil, fmt.Errorf("--rates: %q is not a fraction in (0, 10]", x)
		}
		out = append(out, v)
	}
	if len(out) == 0 {
		return nil, errors.New("--rates: at least one")
	}
	sort.Float64s(out)
	return out, nil
}

// GoodputPoint is one run: a cell at one rate.
type GoodputPoint struct {
	RatePerGPU float64            `json:"ratePerGpu"`
	Attainment map[string]float64 `json:"attainment"` // by SLO name
	TTFT       Dist               `json:"ttft"`
	TPOT       Dist               `json:"tpot"`
	Requests   int                `json:"requests"`
	Failed     int                `json:"failed"`
	// PrefillShare is the share of requests that ran a remote prefill leg.
	PrefillShare   float64 `json:"prefillShare"`
	VirtualSeconds float64 `json:"virtualSeconds"`
	WallSeconds    float64 `json:"wallSeconds"`
}

// GoodputCell is one cell's sweep on one workload.
type GoodputCell struct {
	Workload string                    `json:"workload"`
	Cell     string                    `json:"cell"`
	Shape    Shape                     `json:"shape"`
	Policy   string                    `json:"policy"`
	Config   string                    `json:"config"`
	Points   []GoodputPoint            `json:"points"`
	MaxRate  map[string]report.MaxRate `json:"maxRatePerGpu"` // by SLO name
	// Error is set when a run of the sweep failed (the cell's figures are then partial).
	Error string `json:"error,omitempty"`
}

// GoodputWorkload is one workload's context.
type GoodputWorkload struct {
	Name                 string        `json:"name"`
	Stats                WorkloadStats `json:"stats"`
	CapacityPerGPU       float64       `json:"capacityPerGpu"`
	UnloadedPrefillMs    float64       `json:"unloadedPrefillMs"`
	UnloadedDecodeStepMs float64       `json:"unloadedDecodeStepMs"`
	SLOs                 []report.SLO  `json:"slos"`
}

// GoodputData is goodput.json's data.
type GoodputData struct {
	Options     GoodputOptions    `json:"options"`
	Profile     string            `json:"profile"`
	Workloads   []GoodputWorkload `json:"workloads"`
	Cells       []GoodputCell     `json:"cells"`
	WallSeconds float64           `json:"wallSeconds"`
}

// RunGoodput is `pdgate bench sim goodput`.
func RunGoodput(ctx context.Context, o GoodputOptions) error {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Pods < 2 || o.Requests < 1 || o.Parallel < 1 || !(o.Target > 0 && o.Target <= 1) || len(o.Fractions) == 0 || o.Extend < 0 {
		return fmt.Errorf("bench sim goodput: need --pods >= 2, --requests >= 1, --parallel >= 1, --target in (0, 1], --rates, --extend >= 0")
	}
	w := o.Stdout
	prof, err := loadProfile(Options{Root: o.Root, Profile: o.Profile})
	if err != nil {
		return err
	}
	rows, err := LoadTraces(o.Workloads, Options{Root: o.Root}.path(o.Azure), Options{Root: o.Root}.path(o.Mooncake))
	if err != nil {
		return err
	}
	cells, err := ParseCells(o.Cells, GoodputPolicies(o.Root))
	if err != nil {
		return err
	}
	d := &GoodputData{Options: o, Profile: prof.Name}
	for _, name := range o.Workloads {
		st, err := SampleWorkload(name, rows, o.Seed, 2000, prof.BlockSize)
		if err != nil {
			return err
		}
		gw := GoodputWorkload{Name: name, Stats: st,
			CapacityPerGPU:       CapacityPerGPU(prof, st.MeanPrompt, st.MeanOutput),
			UnloadedPrefillMs:    ms(UnloadedPrefill(prof, int(st.MedianPrompt))),
			UnloadedDecodeStepMs: ms(prof.DecodeStep(1, int(st.MedianPrompt+st.MeanOutput/2))),
			SLOs:                 o.DeriveSLOs(prof, st)}
		d.Workloads = append(d.Workloads, gw)
		var names []string
		for _, s := range gw.SLOs {
			names = append(names, s.String())
		}
		fmt.Fprintf(w, "workload %s: median prompt %.0f, mean prompt %.0f, mean output %.0f tokens, reusable prefix %.0f %%; unloaded prefill %.1f ms, decode step %.2f ms; capacity estimate %.2f req/s per GPU; SLOs: %s\n",
			name, st.MedianPrompt, st.MeanPrompt, st.MeanOutput, 100*st.MeanReuse, gw.UnloadedPrefillMs, gw.UnloadedDecodeStepMs, gw.CapacityPerGPU, strings.Join(names, "; "))
	}
	jobs := crossJobs(d.Workloads, cells)
	printf := lockedPrintf(w)
	start := time.Now()
	results, runErr := runJobs(ctx, o.Parallel, jobs, func(j pair[GoodputWorkload, Cell]) (GoodputCell, error) {
		wl, cell := j.a, j.b
		res, err := sweepCell(ctx, o, prof, rows, wl, cell, func(p GoodputPoint) {
			var att []string
			for _, s := range wl.SLOs {
				att = append(att, fmt.Sprintf("%s %.3f", s.Name, p.Attainment[s.Name]))
			}
			printf("  %-9s %-36s %6.2f req/s/GPU  attainment %s  TTFT p99 %.0f ms  TPOT p99 %.1f ms  prefill legs %.0f %%  wall %.1f s\n",
				wl.Name, cell.Name(), p.RatePerGPU, strings.Join(att, ", "), p.TTFT.P99, p.TPOT.P99, 100*p.PrefillShare, p.WallSeconds)
		})
		if err != nil {
			res.Error = err.Error()
			printf("%s %s: FAILED: %v\n", wl.Name, cell.Name(), err)
			return res, err
		}
		var mr []string
		for _, s := range wl.SLOs {
			mr = append(mr, fmt.Sprintf("%s %s", s.Name, res.MaxRate[s.Name]))
		}
		printf("%s %s: goodput (req/s per GPU at ≥ %.0f %% attainment): %s\n", wl.Name, cell.Name(), 100*o.Target, strings.Join(mr, ", "))
		return res, nil
	})
	if ctx.Err() != nil {
		return runErr
	}
	d.Cells = results
	d.WallSeconds = time.Since(start).Seconds()
	fmt.Fprintf(w, "%d sweeps in %.1f s of wall time\n", len(jobs), d.WallSeconds)
	dir := o.Out
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(o.Root, dir)
	}
	md, err := buildGoodputReport(d).Write(dir)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "report: %s\n", md)
	// a failed cell is in the report; the exit status still says so
	return runErr
}

// sweepCell measures attainment at the sweep's rates (ascending, stopping once every SLO is
// missed), extends above or below when a crossing lies outside, and interpolates the goodput.
func sweepCell(ctx context.Context, o GoodputOptions, prof *costmodel.Profile, rows Traces,
	wl GoodputWorkload, c Cell, onPoint func(GoodputPoint)) (GoodputCell, error) {
	out := GoodputCell{Workload: wl.Name, Cell: c.Name(), Shape: c.Shape, Policy: c.Policy.Name, Config: c.Policy.Config,
		MaxRate: map[string]report.MaxRate{}}
	run := func(rate float64) (GoodputPoint, error) {
		p, err := goodputPoint(ctx, o, prof, rows, wl, c, rate)
		if err == nil {
			out.Points = append(out.Points, p)
			onPoint(p)
		}
		return p, err
	}
	all := func(p GoodputPoint, pass bool) bool {
		for _, s := range wl.SLOs {
			if (p.Attainment[s.Name] >= o.Target) != pass {
				return false
			}
		}
		return true
	}
	var last GoodputPoint
	stopped := false
	for _, f := range o.Fractions {
		p, err := run(f * wl.CapacityPerGPU)
		if err != nil {
			return out, err
		}
		last = p
		if all(p, false) {
			stopped = true
			break
		}
	}
	for k, rate := 0, last.RatePerGPU; !stopped && k < o.Extend && !all(last, false); k++ {
		rate *= 1.5
		p, err := run(rate)
		if err != nil {
			return out, err
		}
		last = p
	}
	low := out.Points[0]
	for k, rate := 0, low.RatePerGPU; k < o.Extend && !all(low, true); k++ {
		rate /= 2
		p, err := run(rate)
		if err != nil {
			return out, err
		}
		low = p
	}
	sortPoints := func() {
		sort.Slice(out.Points, func(i, j int) bool { return out.Points[i].RatePerGPU < out.Points[j].RatePerGPU })
	}
	sortPoints()
	for range o.Refine {
		for _, s := range wl.SLOs {
			lo, hi, ok := crossing(attainmentCurve(out.Points, s.Name), o.Target)
			if !ok || hi < lo*1.05 {
				continue
			}
			if _, err := run((lo + hi) / 2); err != nil {
				return out, err
			}
			sortPoints()
		}
	}
	for _, s := range wl.SLOs {
		out.MaxRate[s.Name] = report.MaxRateAt(attainmentCurve(out.Points, s.Name), o.Target)
	}
	return out, nil
}

// crossing returns the rates around the first fall below target (sorted points).
func crossing(pts []report.RatePoint, target float64) (lo, hi float64, ok bool) {
	for i := 1; i < len(pts); i++ {
		if pts[i-1].Attainment >= target && pts[i].Attainment < target {
			return pts[i-1].Rate, pts[i].Rate, true
		}
		if pts[i-1].Attainment < target {
			return 0, 0, false
		}
	}
	return 0, 0, false
}

func attainmentCurve(points []GoodputPoint, slo string) []report.RatePoint {
	out := make([]report.RatePoint, len(points))
	for i, p := range points {
		out[i] = report.RatePoint{Rate: p.RatePerGPU, Attainment: p.Attainment[slo]}
	}
	return out
}

func goodputPoint(ctx context.Context, o GoodputOptions, prof *costmodel.Profile, rows Traces,
	wl GoodputWorkload, c Cell, ratePerGPU float64) (GoodputPoint, error) {
	if err := ctx.Err(); err != nil {
		return GoodputPoint{}, err
	}
	n := max(o.Requests, int(math.Ceil(ratePerGPU*float64(o.Pods)*o.Duration.Seconds())))
	src, err := NewWorkloadSource(wl.Name, rows, ratePerGPU*float64(o.Pods), o.Seed, n)
	if err != nil {
		return GoodputPoint{}, err
	}
	pods, err := c.Shape.Layout(o.Pods, prof.Model)
	if err != nil {
		return GoodputPoint{}, err
	}
	for i := range pods {
		for k, v := range c.Policy.Annotations {
			pods[i].Labels[protocol.AnnotationLabelPrefix+k] = v
		}
	}
	s, err := New(Config{Profile: prof, Pods: pods, EPPConfig: c.Policy.configPath(o.Root), Model: prof.Model,
		Source: src, Scrape: o.Scrape, Seed: o.Seed})
	if err != nil {
		return GoodputPoint{}, fmt.Errorf("%s: %w", c.Name(), err)
	}
	res, err := s.Run()
	if err != nil {
		return GoodputPoint{}, fmt.Errorf("%s on %s at %.2f req/s per GPU: %w", c.Name(), wl.Name, ratePerGPU, err)
	}
	p := GoodputPoint{RatePerGPU: ratePerGPU, Attainment: map[string]float64{}, TTFT: res.Summary.TTFT, TPOT: res.Summary.TPOT,
		Requests: res.Summary.Requests, VirtualSeconds: res.Summary.VirtualSeconds, WallSeconds: res.Summary.WallSeconds}
	for _, n := range res.failed {
		p.Failed += n
	}
	for _, s := range wl.SLOs {
		p.Attainment[s.Name] = report.Attainment(res.ttft, res.tpot, res.sent, s)
	}
	legs := 0
	for _, pl := range res.perPod {
		legs += pl.prefill
	}
	if res.sent > 0 {
		p.PrefillShare = float64(legs) / float64(res.sent)
	}
	if math.IsNaN(p.PrefillShare) {
		p.PrefillShare = 0
	}
	return p, nil
}
