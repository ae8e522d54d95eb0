package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

// RunOptions are the flags of `pdgate lab`.
type RunOptions struct {
	Options
	Workload    string
	Duration    time.Duration
	Rate        float64
	Concurrency int
	Seed        int64
	MaxRequests int
	JSON        bool
	ShowTraces  int
	MaxTokens   int
	AzureConv   string
}

// NewCommand returns `pdgate lab` (with its `traces` subcommand).
func NewCommand() *cobra.Command {
	o := RunOptions{Options: Options{StatusEvery: 5 * time.Second, Port: 8080}, Duration: 30 * time.Second, Concurrency: 8, Seed: 1}
	cmd := &cobra.Command{
		Use:   "lab",
		Short: "Run the whole disaggregated data path on this machine (simulators, sidecars, EPP, dev gateway)",
		Long: `lab starts, from a topology file (config/lab/*.yaml), a model-server simulator per pod on
its own loopback address, a routing sidecar in front of every decode-capable pod, the EPP in
standalone mode and the dev gateway, all from bin/ (make build). It waits until everything
is healthy, prints the URL, a sample curl and a live status table. Ctrl-C stops everything.

With --workload it drives a workload through the gateway instead, prints one summary
(--json: one JSON object on stdout) and stops.`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.Out, o.Err = cmd.OutOrStdout(), cmd.ErrOrStderr()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return Run(ctx, o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Topology, "topology", DefaultTopology, "topology file")
	f.StringVar(&o.BinDir, "bin-dir", "bin", "directory with sim, sidecar, epp and gateway")
	f.StringVar(&o.Dir, "run-dir", "", "run directory for generated files and logs (default $TMPDIR/pdgate-lab-<subnet>)")
	f.StringVar(&o.Subnet, "subnet", "127.0.10", "first three octets of the pods' loopback addresses")
	f.IntVar(&o.Port, "port", o.Port, "gateway port on 127.0.0.1 (0 = any free port)")
	f.DurationVar(&o.ReadyTimeout, "ready-timeout", 90*time.Second, "how long to wait for every process to be healthy")
	f.DurationVar(&o.StatusEvery, "status-every", o.StatusEvery, "refresh period of the live status table (0 disables)")
	f.BoolVar(&o.Kubernetes, "kubernetes", false, "run the EPP in Kubernetes mode against a local kube-apiserver and etcd, with the InferencePool and pods created through the API")
	f.StringVar(&o.KubeAssets, "kubebuilder-assets", "", "directory with the kube-apiserver and etcd binaries for --kubernetes (default $KUBEBUILDER_ASSETS, else bin/envtest)")
	f.StringVar(&o.CRDDir, "crd-dir", "", "GIE CRD directory for --kubernetes (default config/crd/bases of the GIE module in the Go module cache)")
	f.StringVar(&o.Prometheus, "prometheus", "", "also start a real Prometheus scraping every process (--prometheus: `prometheus` on PATH; --prometheus=PATH: that binary)")
	f.Lookup("prometheus").NoOptDefVal = "prometheus"
	f.BoolVar(&o.OTLP, "otlp", false, "also start an OTLP gRPC trace receiver, point the EPP, sidecars and gateway at it, and write every span to <run-dir>/"+SpansFile)
	f.StringVar(&o.Workload, "workload", "", "drive a workload and exit: "+strings.Join(workload.Names, ", ")+", or a JSONL file")
	f.DurationVar(&o.Duration, "duration", o.Duration, "how long to issue requests (--workload)")
	f.Float64Var(&o.Rate, "rate", 0, "requests per second (0 = closed loop at --concurrency)")
	f.IntVar(&o.Concurrency, "concurrency", o.Concurrency, "requests in flight at most")
	f.Int64Var(&o.Seed, "seed", o.Seed, "workload seed")
	f.IntVar(&o.MaxRequests, "max-requests", 0, "stop after this many requests (0 = --duration only)")
	f.BoolVar(&o.JSON, "json", false, "print the summary as one JSON object")
	f.IntVar(&o.ShowTraces, "show-traces", 0, "include the last N decision traces")
	f.IntVar(&o.MaxTokens, "max-tokens-cap", 0, "cap generated tokens per request (0 = workload's own)")
	f.StringVar(&o.AzureConv, "azure-conv", workload.DefaultAzureConvPath, "Azure conversation trace CSV (azure-conv)")
	cmd.AddCommand(newTracesCommand(), newSpansCommand())
	return cmd
}

// Run is `pdgate lab`.
func Run(ctx context.Context, o RunOptions) error {
	if o.Out == nil {
		o.Out = os.Stdout
	}
	if o.Err == nil {
		o.Err = os.Stderr
	}
	if o.Workload != "" && o.Duration <= 0 && o.MaxRequests <= 0 {
		return errors.New("--duration or --max-requests: a workload run must be bounded")
	}
	var gen workload.Generator
	if o.Workload != "" {
		// Validate the workload before starting anything.
		g, err := workload.New(o.Workload, workload.Options{Seed: o.Seed, AzureConvPath: o.AzureConv, MaxTokensCap: o.MaxTokens})
		if err != nil {
			return err
		}
		gen = g
	}
	if o.Workload == "" || !o.JSON {
		fmt.Fprintln(o.Err, "starting the lab...")
	}
	l, err := Start(ctx, o.Options)
	if err != nil {
		return err
	}
	if gen == nil {
		err := l.Interactive(ctx, o.Options)
		fmt.Fprintln(o.Err, "stopping the lab...")
		l.Stop()
		fmt.Fprintln(o.Err, "stopped: every process of the lab has exited")
		return err
	}
	defer l.Stop()
	if o.Workload != "" {
		// The generator needs the topology's model name: rebuild it now that it is known.
		gen, err = workload.New(o.Workload, workload.Options{Model: l.Plan.Topology.Model, Seed: o.Seed,
			AzureConvPath: o.AzureConv, MaxTokensCap: o.MaxTokens, TimeScale: l.Plan.Topology.TimeScale})
		if err != nil {
			return err
		}
	}
	cfg := loadgen.Config{
		URL: l.URL, Gen: gen, Duration: o.Duration, Rate: o.Rate, Concurrency: o.Concurrency,
		MaxRequests: o.MaxRequests, Trace: true, Classify: l.Plan.Classify, KeepTraces: o.ShowTraces,
	}
	if isTerminal(o.Err) {
		cfg.Progress = o.Err
	}
	res, err := loadgen.Run(ctx, cfg)
	if err != nil {
		return err
	}
	sum := Summary{Topology: l.Plan.Topology.Name, Workload: o.Workload, Result: res, Pods: l.Plan.Status(context.Background()), SpansFile: l.SpansPath}
	if o.JSON {
		enc := json.NewEncoder(o.Out)
		return enc.Encode(sum)
	}
	sum.Print(o.Out)
	return nil
}

// Summary is the output of a workload run.
type Summary struct {
	Topology string `json:"topology"`
	Workload string `json:"workload"`
	*loadgen.Result
	Pods []PodStatus `json:"pods"`
	// SpansFile holds the run's spans (--otlp); the last exports reach it as the lab stops.
	SpansFile string `json:"spansFile,omitempty"`
}

// Print renders the summary for people.
func (s Summary) Print(w io.Writer) {
	fmt.Fprintf(w, "topology %s, workload %s: %d requests in %.1fs\n", s.Topology, s.Workload, s.RequestsSent, s.DurationS)
	fmt.Fprintf(w, "  responses: %v  transport errors: %d  stream errors: %d  hung: %d\n", s.ResponsesByStatus, s.TransportErrors, s.StreamErrors, s.Hung)
	fmt.Fprintf(w, "  decisions: %v  conditional 412s (re-sent in full): %d\n", s.Decisions, s.Conditional412)
	l := s.LatencyMS
	fmt.Fprintf(w, "  TTFT ms p50/p90/p99: %.1f/%.1f/%.1f  TPOT ms: %.2f/%.2f/%.2f  E2E ms: %.1f/%.1f/%.1f\n",
		l.TTFT.P50, l.TTFT.P90, l.TTFT.P99, l.TPOT.P50, l.TPOT.P90, l.TPOT.P99, l.E2E.P50, l.E2E.P90, l.E2E.P99)
	RenderStatus(w, s.Pods)
	if s.SpansFile != "" {
		fmt.Fprintf(w, "  spans: %s\n", s.SpansFile)
	}
	for _, t := range s.Traces {
		fmt.Fprintf(w, "  trace [%s %d %s] %s\n", t.Kind, t.Status, t.Type, t.Decision)
	}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

func newTracesCommand() *cobra.Command {
	return newRunDirCommand("traces [N]", "Show the last N decision traces the running lab's EPP logged (default 10)",
		func(out io.Writer, dir string, n int) error {
			lines, err := LastTraces(filepath.Join(dir, "epp.log"), n)
			if err != nil {
				return err
			}
			for _, l := range lines {
				fmt.Fprintln(out, FormatTrace(l))
			}
			return nil
		})
}

func newSpansCommand() *cobra.Command {
	return newRunDirCommand("spans [N]", "Show the phase timeline of the last N requests of a lab started with --otlp (default 10)",
		func(out io.Writer, dir string, n int) error {
			tls, err := ReadTimelines(filepath.Join(dir, SpansFile))
			if err != nil {
				return err
			}
			if len(tls) == 0 {
				return fmt.Errorf("no request spans in %s yet: send a request through the lab's gateway", filepath.Join(dir, SpansFile))
			}
			for _, t := range tls[max(0, len(tls)-n):] {
				fmt.Fprint(out, t.String())
			}
			return nil
		})
}

// newRunDirCommand is a subcommand that shows the last N (default 10) of something in a lab's
// run directory, found from --run-dir or --subnet.
func newRunDirCommand(use, short string, show func(out io.Writer, dir string, n int) error) *cobra.Command {
	subnet, dir := "127.0.10", ""
	cmd := &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			n := 10
			if len(args) == 1 {
				v, err := strconv.Atoi(args[0])
				if err != nil || v < 1 {
					return fmt.Errorf("argument N: want a positive integer, got %q", args[0])
				}
				n = v
			}
			if dir == "" {
				dir = RunDir(subnet)
			}
			return show(cmd.OutOrStdout(), dir, n)
		},
	}
	cmd.Flags().StringVar(&subnet, "subnet", subnet, "subnet of the lab to read")
	cmd.Flags().StringVar(&dir, "run-dir", "", "run directory of the lab (default from --subnet)")
	return cmd
}

// LastTraces returns the last n "Decision trace" lines of an EPP log.
func LastTraces(logPath string, n int) ([]string, error) {
	f, err := os.Open(logPath)
	if err != nil {
		return nil, fmt.Errorf("no running lab found (%w); start one with `pdgate lab`", err)
	}
	defer f.Close()
	var ring []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64*1024), 16<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), "Decision trace") {
			ring = append(ring, sc.Text())
			if len(ring) > n {
				ring = ring[1:]
			}
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", logPath, err)
	}
	if len(ring) == 0 {
		return nil, fmt.Errorf("no decision traces in %s yet: send a request with `x-pdgate-trace: 1`", logPath)
	}
	return ring, nil
}

// FormatTrace renders one EPP "Decision trace" log line for people: the request id and the
// trace as indented JSON; a line that is not JSON is returned as is.
func FormatTrace(line string) string {
	var rec map[string]json.RawMessage
	if json.Unmarshal([]byte(line), &rec) != nil || rec["trace"] == nil {
		return line
	}
	var id string
	_ = json.Unmarshal(rec["x-request-id"], &id)
	var buf bytes.Buffer
	if json.Indent(&buf, rec["trace"], "  ", "  ") != nil {
		return line
	}
	return "request " + id + ":\n  " + buf.String()
}
