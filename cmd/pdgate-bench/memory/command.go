package memory

import (
	"fmt"

	"github.com/spf13/cobra"
)

// NewCommand is `pdgate-bench memory`.
func NewCommand() *cobra.Command {
	o := DefaultOptions(false)
	c := &cobra.Command{
		SilenceUsage: true,
		Use:          "memory",
		Short:        "Resident memory: pdgate's EPP (512 endpoints, 100k sessions, prefix table filled) next to stock GIE's; the sidecar with 1,000 SSE streams",
		Long: `Starts stock GIE v1.5.0's EPP (default config) and pdgate's EPP with each of --configs (the
recommended config, and config/aibrix/token-load.yaml, which keeps a session table and a prefix
table) as real processes against a local kube-apiserver (envtest binaries in bin/envtest) over the
same --endpoints idle fake vLLM pods, and sends each the same --sessions chat requests over
ext_proc, each with a session key and a prompt of its own (enough prompt text to fill
aibrix-pd-pair's prefix table). Reads each EPP's VmRSS as the requests arrive and its peak (VmHWM)
after, and saves its heap profile. Then starts the real sidecar in front of an engine that holds
every stream open and opens --streams concurrent SSE streams through it. Goals: EPP
<= 256 MiB, sidecar <= 128 MiB, judged on the peak. Writes <out>/memory.{json,md} and PNG plots.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			eff := DefaultOptions(o.Quick)
			flags := cmd.Flags()
			for name, apply := range map[string]func(){
				"out": func() { eff.Out = o.Out }, "endpoints": func() { eff.Endpoints = o.Endpoints },
				"sessions": func() { eff.Sessions = o.Sessions }, "prefix-blocks": func() { eff.PrefixBlocks = o.PrefixBlocks },
				"concurrency": func() { eff.Concurrency = o.Concurrency }, "conns": func() { eff.Conns = o.Conns },
				"configs": func() { eff.ConfigFiles = o.ConfigFiles }, "streams": func() { eff.Streams = o.Streams },
				"bin-dir": func() { eff.BinDir = o.BinDir }, "skip-epp": func() { eff.SkipEPP = o.SkipEPP },
				"skip-sidecar": func() { eff.SkipSidecar = o.SkipSidecar }, "max-phase": func() { eff.MaxPhase = o.MaxPhase },
				"refresh-metrics-interval": func() { eff.ScrapeInterval = o.ScrapeInterval },
			} {
				if flags.Changed(name) {
					apply()
				}
			}
			eff.Log = cmd.ErrOrStderr()
			res, md, err := Run(cmd.Context(), eff)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "report: %s\n", md)
			failed := false
			for _, g := range res.Goals {
				fmt.Fprintf(cmd.OutOrStdout(), "goal %-75s %-10s measured %s: %s\n", g.Name, g.Target, g.Measured, metText(g.Met))
				failed = failed || g.Measured == "not measured" || len(g.Measured) > 12 && g.Measured[:12] == "not measured"
			}
			if failed {
				return fmt.Errorf("bench memory: a part was not measured; see %s", md)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for memory.json, memory.md and the plots")
	f.BoolVar(&o.Quick, "quick", false, "short variant (1,000 sessions whose prompts fill a quarter of the prefix table; same pool and streams): what make bench runs")
	f.IntVar(&o.Endpoints, "endpoints", o.Endpoints, "endpoints both EPPs serve (a multiple of 4)")
	f.IntVar(&o.Sessions, "sessions", o.Sessions, "requests per EPP, each a new session key and prompt (quick: 1000)")
	f.IntVar(&o.PrefixBlocks, "prefix-blocks", 0, "distinct prefix blocks the prompts carry in total (default 1.25 × aibrix-pd-pair's prefix table capacity; quick: a quarter of it)")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "concurrent ext_proc streams")
	f.IntVar(&o.Conns, "conns", o.Conns, "HTTP/2 connections to the EPP")
	f.StringSliceVar(&o.ConfigFiles, "configs", o.ConfigFiles, "pdgate EndpointPickerConfigs to measure (relative to the repository root)")
	f.IntVar(&o.Streams, "streams", o.Streams, "concurrent SSE streams through the sidecar")
	f.StringVar(&o.BinDir, "bin-dir", "", "directory with epp, gie-epp and sidecar (default <repo>/bin; missing ones are built)")
	f.BoolVar(&o.SkipEPP, "skip-epp", false, "leave the EPP part out")
	f.BoolVar(&o.SkipSidecar, "skip-sidecar", false, "leave the sidecar part out")
	f.DurationVar(&o.ScrapeInterval, "refresh-metrics-interval", o.ScrapeInterval, "both EPPs' metrics scrape interval (the binaries default to 50ms: 10,000 scrapes/s over 512 pods)")
	f.DurationVar(&o.MaxPhase, "max-phase", o.MaxPhase, "wall-clock cap of each load phase (quick: 60s)")
	return c
}
