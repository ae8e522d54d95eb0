// Package epp is `pdgate-bench epp`: ext_proc throughput, EPP CPU per request, EPP-added
// latency, burst spreading and memory of stock GIE v1.5.0's EPP and pdgate's EPP with each
// pdgate config, as real processes, in one run.
package epp

import (
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
)

// NewCommand is `pdgate-bench epp`.
func NewCommand() *cobra.Command {
	var (
		o       = DefaultOptions(false)
		sizes   []string
		configs []string
	)
	c := &cobra.Command{
		Use:   "epp",
		Short: "ext_proc request path: stock GIE's EPP vs pdgate's EPP per config (req/s, CPU/request, latency, burst spread, RSS)",
		Long: `Starts stock GIE v1.5.0's EPP (default config, the baseline) and pdgate's EPP with each pdgate
config as real processes against a local kube-apiserver (envtest binaries in bin/envtest) with idle
fake vLLM pods on loopback addresses, and drives them over real ext_proc gRPC the way Envoy does
(FULL_DUPLEX_STREAMED body frames, response phase included) with many concurrent streams and OpenAI
chat bodies of 1 KB, 16 KB, 220 KB and 1 MB. Reports req/s, EPP CPU ms per request, EPP-added latency
p50/p99, errors and ratios to stock; then a burst of back-to-back requests over 8 equal idle pods
(max/min per pod) and each EPP's resident memory. Writes <out>/epp.{json,md} and PNG plots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags := cmd.Flags()
			eff := DefaultOptions(o.Quick)
			eff.Quick = o.Quick
			for name, apply := range map[string]func(){
				"out": func() { eff.Out = o.Out }, "requests": func() { eff.Requests = o.Requests },
				"concurrency": func() { eff.Concurrency = o.Concurrency }, "conns": func() { eff.Conns = o.Conns },
				"chunk-size": func() { eff.ChunkSize = o.ChunkSize }, "burst": func() { eff.Burst = o.Burst },
				"parser": func() { eff.Parser = o.Parser }, "max-phase": func() { eff.MaxPhase = o.MaxPhase },
				"memory-endpoints": func() { eff.MemoryEndpoints = o.MemoryEndpoints }, "bin-dir": func() { eff.BinDir = o.BinDir },
				"cpu-profile": func() { eff.CPUProfile = o.CPUProfile }, "instructions": func() { eff.Instructions = o.Instructions },
				"repeats": func() { eff.Repeats = o.Repeats }, "pods": func() { eff.Pods = o.Pods },
				"stream-events": func() { eff.StreamEvents = o.StreamEvents },
			} {
				if flags.Changed(name) {
					apply()
				}
			}
			if flags.Changed("sizes") {
				parsed, err := ParseSizes(sizes)
				if err != nil {
					return err
				}
				eff.Sizes = parsed
				if !flags.Changed("requests") {
					eff.Requests = scaleRequests(eff.Sizes, eff.Quick)
				}
			}
			eff.Configs = configs
			if eff.Instructions {
				eff.applyInstructionDefaults(flags.Changed("requests"), flags.Changed("max-phase"), flags.Changed("concurrency"))
			}
			eff.Progress = cmd.ErrOrStderr()
			// envtest logs through controller-runtime; its chatter is not the bench's output.
			ctrllog.SetLogger(logr.Discard())
			// Interrupted, the run still stops its EPPs and the control plane (deferred).
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			res, md, err := Run(ctx, eff)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", md)
			for _, g := range Goals(res) {
				fmt.Fprintf(cmd.OutOrStdout(), "goal %-12s %-40s measured %6.2f  %s (%s)\n", g.Config, g.Goal, g.Measured, metText(g.Met), g.Note)
			}
			for _, cr := range res.Configs {
				if cr.Error != "" {
					return fmt.Errorf("config %s failed: %s", cr.Name, firstLine(cr.Error))
				}
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for epp.json, epp.md and the plots")
	f.BoolVar(&o.Quick, "quick", false, "short variant (fewer requests, smaller burst, no 512-endpoint memory run): what make bench runs, under 2 minutes")
	f.StringSliceVar(&sizes, "sizes", []string{"1k", "16k", "220k", "1024k"}, "request body sizes (bytes, or with a k suffix for KiB); also the filter: --sizes 220k,1024k runs only those")
	f.IntSliceVar(&o.Requests, "requests", o.Requests, "measured requests per size (default 3000,1500,300,60; quick 600,300,60,15)")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "concurrent ext_proc streams")
	f.IntVar(&o.Conns, "conns", o.Conns, "HTTP/2 connections to the EPP (streams are spread over them)")
	f.IntVar(&o.ChunkSize, "chunk-size", o.ChunkSize, "request body frame size in bytes")
	f.IntVar(&o.Burst, "burst", o.Burst, "requests in the burst-spreading run (0 skips it; quick: 400)")
	f.StringSliceVar(&configs, "configs", nil, "configs to run, baseline first (default all: "+configNames()+")")
	f.StringVar(&o.Parser, "parser", o.Parser, "map or raw: add pdgate-openai-parser with that payload mode to configs naming no parser; none: files as they are")
	f.DurationVar(&o.MaxPhase, "max-phase", o.MaxPhase, "wall-clock cap of one measured load phase")
	f.IntVar(&o.MemoryEndpoints, "memory-endpoints", o.MemoryEndpoints, "also start every EPP with this many idle endpoints and report RSS (0 skips; quick: 0)")
	f.DurationVar(&o.CPUProfile, "cpu-profile", 0, "profile each EPP's CPU for this long (whole seconds) from the start of the measured phase at the last size, into <out>/<config>-<size>.pprof for go tool pprof (raise --requests so the phase lasts longer)")
	f.IntVar(&o.Repeats, "repeats", 1, "run each measured phase this many times and report the median with the spread (max-min over the median) of the net CPU")
	f.IntVar(&o.Pods, "pods", 0, "pods per pool, a multiple of 4: stock GIE's all plain, a P/D pool half decode and half the other roles (8: 4 decode + 4 prefill); 0: 8 primary pods each (stock 8, P/D 16)")
	f.BoolVar(&o.Instructions, "instructions", false, "meter the phases in instructions executed (valgrind's callgrind; CPU columns then read in millions of instructions) instead of CPU time: the same figures on a busy machine as on a quiet one; wants fewer --requests (callgrind runs 30-100x slower)")
	f.Float64Var(&o.TraceSampleRatio, "trace-sample-ratio", 1, "fraction of requests a "+TracedSuffix+" config samples (OTEL_TRACES_SAMPLER=parentbased_traceidratio below 1; 1 samples every request, the worst case)")
	f.IntVar(&o.StreamEvents, "stream-events", 0, "play every answer streamed: this many token events (plus the usage event and [DONE]), one response body frame each, the requests asking stream: true; 0: one non-streamed body")
	f.StringVar(&o.BinDir, "bin-dir", "", "directory with epp and gie-epp (default <repo>/bin; missing ones are built)")
	return c
}

// ParseSizes reads sizes like "1024", "1k", "220K".
func ParseSizes(in []string) ([]int, error) {
	var out []int
	for _, s := range in {
		t := strings.TrimSpace(strings.ToLower(s))
		mult := 1
		if strings.HasSuffix(t, "k") || strings.HasSuffix(t, "kb") {
			t, mult = strings.TrimSuffix(strings.TrimSuffix(t, "b"), "k"), 1<<10
		}
		n, err := strconv.Atoi(t)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--sizes: %q is not a size (bytes, or KiB with a k suffix)", s)
		}
		out = append(out, n*mult)
	}
	return out, nil
}

// scaleRequests picks request counts for custom sizes: about the same bytes per phase as the
// defaults (3000 × 1 KB ... 300 × 220 KB), at least 50.
func scaleRequests(sizes []int, quick bool) []int {
	budget := 66 << 20
	if quick {
		budget = 13 << 20
	}
	out := make([]int, len(sizes))
	for i, s := range sizes {
		out[i] = min(3000, max(50, budget/s))
		if quick {
			out[i] = min(out[i], 600)
		}
	}
	return out
}
