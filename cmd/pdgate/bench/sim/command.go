package simbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Options configure `pdgate bench sim`.
type Options struct {
	Root  string // repository root (configs, the recorded lab run)
	Out   string
	Quick bool
	Pods  int
	// Shape splits the P/D fleets' pods ("pd-P:D", ParseShape; "" = half prefill, half
	// decode as FleetPD lays them out). Combined fleets ignore it.
	Shape    string
	Requests int // per policy and load
	Loads    []float64
	Policies string
	Profile  string // cost profile file; "" = DefaultProfile
	// CPUOffloadTokens gives every simulated engine a CPU offload tier of that many tokens
	// (the profile's cpuOffload.capacityTokens; its bandwidthGBps loads them); 0 = the
	// profile's own.
	CPUOffloadTokens int
	Azure            string
	// Trace replays another trace instead of the Azure one: "mooncake=FILE" (ParseTraceSpec);
	// "" = the Azure trace (--azure-conv).
	Trace  string
	Seed   int64
	SLO    SLO
	Scrape time.Duration
	// Overheads of the scale runs (the data path outside the engines); zero = engines and
	// routing alone.
	Overheads Overheads
	// Calibration is the recorded lab run; RecordLab records a fresh one first (real
	// processes from BinDir, minutes).
	Calibration string
	RecordLab   bool
	BinDir      string
	Tolerance   float64
	// Topology lays the fleet out as "ZONESxRACKS" (topology.go); "" = no placement (every KV
	// transfer costs the profile's rack-local time).
	Topology string
	// TransferCost overrides the placement's transfer multipliers ("HOST,RACK,ZONE,REGION",
	// ParseTransferCost; "" = DefaultTransferCost).
	TransferCost string
	// Parallel runs that many policy runs at once.
	Parallel int
	Stdout   io.Writer
	// Progress receives a line per tenth of each run of 100,000 requests or more (nil = none).
	Progress io.Writer
}

// Defaults are the full run's settings; Quick shrinks them.
func Defaults() Options {
	return Options{Root: ".", Out: "bench-results/sim", Pods: 256, Requests: 1_000_000, Loads: []float64{0.5, 0.8, 1.0},
		Policies: "all", Azure: workload.DefaultAzureConvPath, Seed: 1,
		SLO:    SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond},
		Scrape: 50 * time.Millisecond, Calibration: "config/bench/sim/lab-default-azure300.json",
		BinDir: "bin", Tolerance: 0.10, Parallel: 2}
}

// NewCommand is `pdgate bench sim`.
func NewCommand() *cobra.Command {
	o := Defaults()
	var loads string
	var pods, requests int
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "Cluster simulation at scale: GIE's scheduler with pdgate's plugins in virtual time over simulated pods",
		Long: `Runs GIE's real scheduler, configured from each policy's EndpointPickerConfig through the
EPP's own plugin registration, against simulated pods (the simulator's cost model, batching
scheduler and prefix cache on one virtual clock), replaying the Azure conversation trace tiled
and rate-scaled to each load (a fraction of the fleet's estimated capacity). Prints TTFT, TPOT
and E2E percentiles, goodput, per-pod spread and the EPP's CPU per request next to stock GIE's,
after checking the simulation against a recorded real-process lab run (p50 TTFT within 10 %).
Full: 256 pods, 1,000,000 requests per policy and load; --quick: 64 pods, 10,000 requests, load 0.8.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			// The plugins log through controller-runtime's logger; with none set it prints a
			// stack trace after 30 s, and per-request logs are not the bench's output.
			ctrllog.SetLogger(logr.Discard())
			o.Progress = c.ErrOrStderr()
			if o.Quick {
				o.Pods, o.Requests, o.Loads = 64, 10_000, []float64{0.8}
			}
			if c.Flags().Changed("pods") {
				o.Pods = pods
			}
			if c.Flags().Changed("requests") {
				o.Requests = requests
			}
			if c.Flags().Changed("loads") || !o.Quick {
				ls, err := parseLoads(loads)
				if err != nil {
					return err
				}
				o.Loads = ls
			}
			o.Stdout = c.OutOrStdout()
			return Run(c.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for sim.json, sim.md and the PNG plots")
	f.BoolVar(&o.Quick, "quick", false, "the short variant make bench runs (64 pods, 10,000 requests, load 0.8)")
	f.IntVar(&pods, "pods", o.Pods, "simulated GPUs per fleet (P/D fleets: half prefill, half decode unless --shape says otherwise)")
	f.StringVar(&o.Shape, "shape", "", "P/D fleets' prefill:decode split, pd-P:D (e.g. pd-2:1); default half and half")
	f.IntVar(&requests, "requests", o.Requests, "requests per policy and load")
	f.StringVar(&loads, "loads", "0.5,0.8,1.0", "offered loads as fractions of the fleet's estimated capacity")
	f.StringVar(&o.Policies, "policies", o.Policies, "comma-separated policies, or all; NAME=FILE runs an EndpointPickerConfig of your own on the P/D fleet")
	fleetFlags(f, &o.Profile, &o.Scrape)
	f.StringVar(&o.Azure, "azure-conv", o.Azure, "Azure conversation trace CSV (the workload unless --trace names another; always the calibration's)")
	f.StringVar(&o.Trace, "trace", "", "replay this trace instead of the Azure one: mooncake=FILE (a Mooncake JSONL trace, e.g. "+workload.DefaultMooncakePath+"), azure-conv=FILE")
	f.Int64Var(&o.Seed, "seed", o.Seed, "workload seed")
	f.DurationVar(&o.SLO.TTFT, "slo-ttft", o.SLO.TTFT, "goodput: TTFT target")
	f.DurationVar(&o.SLO.TPOT, "slo-tpot", o.SLO.TPOT, "goodput: TPOT target")
	f.DurationVar(&o.Overheads.Route, "route-overhead", 0, "gateway + EPP time before a request leaves the gateway (scale runs)")
	f.DurationVar(&o.Overheads.Hop, "hop-overhead", 0, "one HTTP traversal between processes (scale runs)")
	f.DurationVar(&o.Overheads.Step, "step-overhead", 0, "added to every engine step (scale runs)")
	f.StringVar(&o.Calibration, "calibration", o.Calibration, "recorded lab run to check the simulation against")
	f.BoolVar(&o.RecordLab, "record-lab", false, "record a fresh lab run first (real processes from --bin-dir; a few minutes)")
	f.StringVar(&o.BinDir, "bin-dir", o.BinDir, "binaries for --record-lab")
	f.IntVar(&o.CPUOffloadTokens, "cpu-offload-tokens", 0, "give every engine a CPU KV offload tier of this many tokens (vLLM --kv-offloading-size; the profile's cpuOffload.bandwidthGBps loads them back); 0 = the profile's")
	f.StringVar(&o.TransferCost, "transfer-cost", "", "with --topology: multipliers of the rack-local KV transfer time when prefill and decode share a host, a rack, a zone, the region, as HOST,RACK,ZONE,REGION (default 0.25,1,2,4)")
	f.StringVar(&o.Topology, "topology", "", "lay the fleet out over ZONESxRACKS (e.g. 2x4; 1x1 = one rack), 4 pods per host; a KV transfer's time scales with the distance between its prefill and decode pods")
	f.IntVar(&o.Parallel, "parallel", o.Parallel, "policy runs at once (each measures the EPP's CPU on its own thread)")
	f.Float64Var(&o.Tolerance, "tolerance", o.Tolerance, "calibration: allowed relative p50 TTFT error")
	cmd.AddCommand(NewGoodputCommand())
	cmd.AddCommand(NewPrefixCommand())
	cmd.AddCommand(NewAdvisorCommand())
	cmd.AddCommand(NewCompatCommand())
	cmd.AddCommand(NewOverloadCommand())
	return cmd
}

func parseLoads(s string) ([]float64, error) {
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v > 0) || v > 10 {
			return nil, fmt.Errorf("--loads: %q is not a load in (0, 10]", f)
		}
		out = append(out, v)
	}
	return out, nil
}

// Validate checks the options; errors name the flag.
func (o Options) Validate() error {
	var errs []error
	if o.Pods < 2 || o.Pods%2 != 0 {
		errs = append(errs, fmt.Errorf("--pods must be an even number >= 2, got %d", o.Pods))
	}
	if o.Shape != "" {
		if sh, err := ParseShape(o.Shape); err != nil {
			errs = append(errs, fmt.Errorf("--shape: %w", err))
		} else if sh.Combined > 0 || sh.IsCombined() {
			errs = append(errs, fmt.Errorf("--shape %q: want pd-P:D (the P/D fleets' split)", o.Shape))
		}
	}
	if o.Requests < 1 {
		errs = append(errs, fmt.Errorf("--requests must be >= 1, got %d", o.Requests))
	}
	if len(o.Loads) == 0 {
		errs = append(errs, errors.New("--loads: at least one load"))
	}
	if o.SLO.TTFT <= 0 || o.SLO.TPOT <= 0 {
		errs = append(errs, errors.New("--slo-ttft and --slo-tpot must be > 0"))
	}
	if o.Scrape <= 0 {
		errs = append(errs, errors.New("--scrape-interval must be > 0"))
	}
	if o.Overheads.Route < 0 || o.Overheads.Hop < 0 || o.Overheads.Step < 0 {
		errs = append(errs, errors.New("--route-overhead, --hop-overhead and --step-overhead must be >= 0"))
	}
	if o.Parallel < 1 {
		errs = append(errs, fmt.Errorf("--parallel must be >= 1, got %d", o.Parallel))
	}
	if o.CPUOffloadTokens < 0 {
		errs = append(errs, fmt.Errorf("--cpu-offload-tokens must be >= 0, got %d", o.CPUOffloadTokens))
	}
	if !(o.Tolerance > 0) {
		errs = append(errs, errors.New("--tolerance must be > 0"))
	}
	if o.Trace != "" {
		if _, err := ParseTraceSpec(o.Trace); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// Run is `pdgate bench sim`.
func Run(ctx context.Context, o Options) error {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if err := o.Validate(); err != nil {
		return err
	}
	policies, err := SelectPolicies(o.Policies)
	if err != nil {
		return err
	}
	prof, err := loadProfile(o)
	if err != nil {
		return err
	}
	azure := o.path(o.Azure)
	rows, err := workload.LoadAzureFile(azure)
	if err != nil {
		return fmt.Errorf("--azure-conv: %w", err)
	}
	w := o.Stdout
	d := &Data{Options: o, Profile: prof.Name}
	newSource, trace, err := o.workloadSource(rows)
	if err != nil {
		return err
	}
	d.Trace = &trace

	cal, err := o.calibrate(ctx, azure)
	if err != nil {
		return err
	}
	d.Calibration = cal
	fmt.Fprintf(w, "calibration (%s, %s, first %d requests): lab p50 TTFT %.1f ms, simulated %.1f ms (%+.1f %%; engines alone %.1f ms): within %.0f %%: %s\n",
		cal.Topology, cal.Workload, cal.Requests, cal.LabTTFT.P50, cal.SimTTFT.P50, 100*cal.ErrorP50, cal.ModelOnly.P50,
		100*cal.Tolerance, metWord(cal.Met))

	mp, mo := trace.MeanPrompt, trace.MeanOutput
	if trace.FollowUps > 0 {
		fmt.Fprintf(w, "trace %s: %d requests, %.1f %% of prompt blocks reuse an earlier prefix, %d follow-up turns\n",
			trace.File, trace.Requests, 100*trace.ReusedBlockShare, trace.FollowUps)
	}
	d.CapacityPerGPU = CapacityPerGPU(prof, mp, mo)
	capacity := d.CapacityPerGPU * float64(o.Pods)
	fmt.Fprintf(w, "fleet: %d simulated GPUs, estimated capacity %.0f req/s (%.2f per GPU for the %s trace's mean %0.f prompt / %.0f output tokens)\n",
		o.Pods, capacity, d.CapacityPerGPU, trace.Name, mp, mo)
	jobs := crossJobs(o.Loads, policies)
	printf := lockedPrintf(w)
	wallStart := time.Now()
	runs, err := runJobs(ctx, o.Parallel, jobs, func(j pair[float64, Policy]) (RunData, error) {
		load, p := j.a, j.b
		run, err := runPolicy(ctx, o, prof, newSource, p, load, capacity)
		if err != nil {
			return run, err
		}
		sm := run.Summary
		line := fmt.Sprintf("load %.2f %-24s TTFT p50/p90/p99 %.1f/%.1f/%.1f ms  TPOT p50/p99 %.2f/%.2f ms  goodput %.3f  EPP CPU %.0f µs/req  wall %.1f s\n",
			load, p.Name, sm.TTFT.P50, sm.TTFT.P90, sm.TTFT.P99, sm.TPOT.P50, sm.TPOT.P99, sm.Goodput, sm.EPPCPUMicrosPerRequest, sm.WallSeconds)
		if sm.FollowUpTTFT != nil {
			line += fmt.Sprintf("           %-24s first turns TTFT p50/p90/p99 %.1f/%.1f/%.1f ms  follow-ups %.1f/%.1f/%.1f ms  prefix hits %.1f %%  prefill computed %.3g of %.3g tokens (%.3g another pod held)\n",
				"", sm.FirstTurnTTFT.P50, sm.FirstTurnTTFT.P90, sm.FirstTurnTTFT.P99, sm.FollowUpTTFT.P50, sm.FollowUpTTFT.P90, sm.FollowUpTTFT.P99,
				100*sm.PrefixHitRate, float64(sm.ComputedPrefillTokens), float64(sm.PromptTokens), float64(sm.MissedReuseTokens))
			if sm.CPULoadedTokens > 0 {
				line = strings.TrimSuffix(line, "\n") + fmt.Sprintf(", %.3g hits loaded from CPU\n", float64(sm.CPULoadedTokens))
			}
		}
		printf("%s", line)
		return run, nil
	})
	if err != nil {
		return err
	}
	d.Runs = runs
	d.WallSeconds = time.Since(wallStart).Seconds()
	fmt.Fprintf(w, "%d runs in %.1f s of wall time (%d at a time)\n", len(jobs), d.WallSeconds, max(1, min(o.Parallel, len(jobs))))
	rep := buildReport(d, policies)
	md, err := rep.Write(o.path(o.Out))
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "report: %s\n", md)
	return nil
}

func runPolicy(ctx context.Context, o Options, prof *costmodel.Profile, newSource func(rate float64) (Source, error), p Policy, load, capacity float64) (RunData, error) {
	if err := ctx.Err(); err != nil {
		return RunData{}, err
	}
	src, err := newSource(load * capacity)
	if err != nil {
		return RunData{}, err
	}
	placement, err := ParsePlacement(o.Topology)
	if err != nil {
		return RunData{}, err
	}
	if o.TransferCost != "" {
		if placement == nil {
			return RunData{}, fmt.Errorf("--transfer-cost needs --topology")
		}
		if placement.Cost, err = ParseTransferCost(o.TransferCost); err != nil {
			return RunData{}, err
		}
	}
	pods, err := p.shapedFleet(o.Pods, o.Shape, prof.Model)
	if err != nil {
		return RunData{}, err
	}
	placement.Apply(pods)
	cfg := Config{Profile: prof, Pods: pods, EPPConfig: p.configPath(o.Root),
		Model: prof.Model, Source: src, Scrape: o.Scrape, Overheads: o.Overheads, Placement: placement, Seed: o.Seed}
	if o.Progress != nil && o.Requests >= progressMinRequests {
		began, step := time.Now(), o.Requests/10
		cfg.OnArrival = func(n int) {
			if n%step == 0 {
				fmt.Fprintf(o.Progress, "  %s at load %.2f: %d of %d requests sent, %.0f s of wall time\n",
					p.Name, load, n, o.Requests, time.Since(began).Seconds())
			}
		}
	}
	s, err := New(cfg)
	if err != nil {
		return RunData{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	res, err := s.Run()
	if err != nil {
		return RunData{}, fmt.Errorf("policy %s at load %.2f: %w", p.Name, load, err)
	}
	res.Summary.Goodput = res.Goodput(o.SLO)
	return RunData{Policy: p.Name, Load: load, Rate: load * capacity, Summary: res.Summary, ttft: res.ttft}, nil
}

// progressMinRequests is the run size from which progress lines are printed.
const progressMinRequests = 100_000

func metWord(ok bool) string {
	if ok {
		return "met"
	}
	return "NOT met"
}

func (o Options) path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(o.Root, p)
}

// DefaultProfile is the cost profile the simulated engines run on when --profile names none.
const DefaultProfile = "config/sim/llama3-8b-h100.yaml"

// fleetFlags registers the flags every virtual-time fleet bench reads alike, so that their
// names, defaults and help stay one: the engines' cost profile and the EPP's metrics refresh
// interval.
func fleetFlags(f *pflag.FlagSet, profile *string, scrape *time.Duration) {
	f.StringVar(profile, "profile", "", "cost profile (default "+DefaultProfile+")")
	f.DurationVar(scrape, "scrape-interval", *scrape, "the EPP's metrics refresh interval")
}

func loadProfile(o Options) (*costmodel.Profile, error) {
	p := o.Profile
	if p == "" {
		p = DefaultProfile
	}
	prof, err := costmodel.Load(o.path(p))
	if err != nil {
		return nil, fmt.Errorf("--profile: %w", err)
	}
	if o.CPUOffloadTokens > 0 {
		prof.CPUOffload.CapacityTokens = o.CPUOffloadTokens
		if err := prof.Validate(); err != nil {
			return nil, fmt.Errorf("--cpu-offload-tokens with profile %s: %w", p, err)
		}
	}
	return prof, nil
}

func (o Options) calibrate(ctx context.Context, azure string) (*Calibration, error) {
	if !o.RecordLab {
		c, err := Calibrate(o.Root, o.path(o.Calibration), azure, nil, o.Tolerance)
		if err != nil {
			return nil, fmt.Errorf("calibration: %w", err)
		}
		return c, nil
	}
	old, err := LoadLabRecord(o.path(o.Calibration))
	if err != nil {
		return nil, fmt.Errorf("--record-lab reads the slice to record from --calibration: %w", err)
	}
	fmt.Fprintf(o.Stdout, "recording the lab: %s, %s, %d requests (real processes)...\n", old.Topology, old.Workload, old.Requests)
	rec, err := RecordLab(ctx, RecordOptions{Topology: o.path(old.Topology), BinDir: o.path(o.BinDir), AzurePath: azure,
		Workload: old.Workload, Requests: old.Requests, Concurrency: old.Concurrency, Seed: old.Seed, Subnet: "127.0.79", Err: os.Stderr})
	if err != nil {
		return nil, err
	}
	rec.Topology = old.Topology
	rec.Command = strings.Join(os.Args, " ")
	if err := os.MkdirAll(o.path(o.Out), 0o755); err != nil {
		return nil, err
	}
	out := filepath.Join(o.path(o.Out), "lab-record.json")
	b, err := report.MarshalIndent(rec)
	if err != nil {
		return nil, fmt.Errorf("lab record: %w", err)
	}
	if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.Stdout, "lab record written to %s (copy it to %s to make it the reference)\n", out, o.Calibration)
	return CalibrateRecord(o.Root, rec, out, azure, nil, o.Tolerance)
}
