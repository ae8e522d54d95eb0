package simbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
	"github.com/pdgate/pdgate/plugins/wire/bytetokens"
	"github.com/pdgate/pdgate/plugins/wire/kvevents"
)

// kvEventSink is a plugin that takes KV events in process (precise-prefix-cache-producer and
// precise-prefix-cache-scorer): the simulated pods' prefix-cache changes are delivered to it
// as the simulator would publish them (cmd/sim/server: the same kvcache.Events), at the
// instant they happen (a real subscriber sees them a ZeroMQ hop later).
type kvEventSink interface {
	DeliverKVEvents(meta *fwkdl.EndpointMetadata, events []kvevents.Event)
}

// cacheInsert puts a request's prompt blocks into p's prefix cache (its KV exists on p now),
// and into its CPU tier as an offloading engine writes every computed block there, and, when
// the EPP has a precise prefix plugin, reports what changed (stores, evictions) per tier.
func (s *Sim) cacheInsert(p *pod, r *request) {
	sinks := 0
	for _, e := range s.epps {
		sinks += len(e.kv)
	}
	if sinks == 0 {
		p.cache.Insert(r.hashes)
		if p.cpu != nil {
			p.cpu.Insert(r.hashes)
		}
		return
	}
	events := kvcache.Events(p.cache.InsertObserved(r.hashes), r.hashes, r.a.Tokens, s.prof.BlockSize)
	if p.cpu != nil {
		events = append(events, kvcache.TierEvents("CPU", p.cpu.InsertObserved(r.hashes), r.hashes, r.a.Tokens, s.prof.BlockSize)...)
	}
	if len(events) == 0 {
		return
	}
	// every router follows every engine's events; ingesting them is EPP work
	for _, e := range s.epps {
		start := threadCPU()
		for _, k := range e.kv {
			k.DeliverKVEvents(p.meta, events)
		}
		e.cpu += threadCPU() - start
	}
}

// PrefixPolicies compare approximate and precise prefix-cache routing: the same
// scorers and weights, only the prefix scorer's data differs.
var PrefixPolicies = []Policy{
	{Name: "prefix-approx", Config: "config/bench/prefix/approx.yaml", Fleet: FleetKindCombined,
		About: "GIE prefix-cache-scorer, approximate (where the EPP sent prompts), + queue and KV-use scorers"},
	{Name: "prefix-precise", Config: "config/bench/prefix/precise.yaml", Fleet: FleetKindCombined,
		About: "llm-d precise-prefix-cache-scorer on the engines' KV events (stores and evictions), + queue and KV-use scorers"},
}

// SharedPrefix is a shared-prefix chat workload: Prefixes system prompts / RAG documents of
// PrefixTokens, picked by a Zipf law (s = Zipf) so a few are hot and a long tail is cold, each
// request one of them followed by a fresh user question of SuffixTokens. With enough prefixes
// the fleet's KV cannot hold them all and engines evict: what the approximate index cannot see.
type SharedPrefix struct {
	Prefixes     int
	PrefixTokens [2]int
	SuffixTokens [2]int
	Output       [2]int
	Zipf         float64
}

// DefaultSharedPrefix is the comparison's workload (its working set, ~2,000 prefixes of
// 1,000-5,000 tokens, is ~6M tokens: more than 8 pods' 400,000-token KV caches can hold).
var DefaultSharedPrefix = SharedPrefix{Prefixes: 2000, PrefixTokens: [2]int{1000, 5000}, SuffixTokens: [2]int{50, 300},
	Output: [2]int{16, 128}, Zipf: 1.1}

func (w SharedPrefix) means() (prompt, output float64) {
	return float64(w.PrefixTokens[0]+w.PrefixTokens[1]+w.SuffixTokens[0]+w.SuffixTokens[1]) / 2,
		float64(w.Output[0]+w.Output[1]) / 2
}

// sharedPrefixSource yields the workload as a Poisson process at rate req/s.
type sharedPrefixSource struct {
	w        SharedPrefix
	model    string
	prefixes []string
	zipf     *rand.Zipf
	rng      *rand.Rand
	rate     float64
	t        time.Duration
	max, n   int
}

// NewSharedPrefixSource yields max requests of w at rate req/s; seed fixes the prefixes, the
// picks, the questions and the arrival times (the same for every policy).
func NewSharedPrefixSource(w SharedPrefix, model string, rate float64, seed int64, max int) (Source, error) {
	if w.Prefixes < 1 || w.PrefixTokens[0] < 1 || w.PrefixTokens[1] < w.PrefixTokens[0] || w.SuffixTokens[0] < 1 ||
		w.SuffixTokens[1] < w.SuffixTokens[0] || w.Output[0] < 1 || w.Output[1] < w.Output[0] || !(w.Zipf > 1) {
		return nil, fmt.Errorf("shared-prefix workload: invalid %+v", w)
	}
	if !(rate > 0) {
		return nil, fmt.Errorf("shared-prefix workload: rate must be > 0, got %v", rate)
	}
	rng := rand.New(rand.NewSource(seed))
	s := &sharedPrefixSource{w: w, model: model, rng: rng, rate: rate, max: max,
		zipf: rand.NewZipf(rng, w.Zipf, 1, uint64(w.Prefixes-1))}
	for i := 0; i < w.Prefixes; i++ {
		// each prefix starts with its own id, so two never share a first block by chance
		s.prefixes = append(s.prefixes, fmt.Sprintf("[doc %d] ", i)+workload.Text(rng, between(rng, w.PrefixTokens)))
	}
	return s, nil
}

func between(rng *rand.Rand, r [2]int) int { return r[0] + rng.Intn(r[1]-r[0]+1) }

func (s *sharedPrefixSource) Next() (Arrival, bool) {
	if s.n >= s.max {
		return Arrival{}, false
	}
	s.n++
	prefix := s.prefixes[s.zipf.Uint64()]
	question := fmt.Sprintf("[q %d] ", s.n) + workload.Text(s.rng, between(s.rng, s.w.SuffixTokens))
	out := between(s.rng, s.w.Output)
	s.t += time.Duration(s.rng.ExpFloat64() / s.rate * float64(time.Second))
	msgs := []fwksched.Message{{Role: "system", Content: fwksched.Content{Raw: prefix}}, {Role: "user", Content: fwksched.Content{Raw: question}}}
	var pk bytetokens.Packer
	pk.Grow(len(prefix) + len(question) + 10)
	for _, m := range msgs {
		pk.ChatMessage(m.Role, m.Content.Raw) // the simulator's chat template
	}
	pk.Flush()
	return Arrival{At: s.t, Kind: "shared-prefix", Output: out, Bytes: len(prefix) + len(question) + 160,
		Body:   &fwksched.LLMRequestBody{ChatCompletions: &fwksched.ChatCompletionsRequest{Messages: msgs}},
		Tokens: pk.Tokens}, true
}

// PrefixOptions configure `pdgate bench sim prefix`.
type PrefixOptions struct {
	Root, Out, Profile string
	Pods, Requests     int
	Load               float64
	Seed               int64
	// Routers lists the router counts to run each policy with: independent EPPs sharing no
	// routing state, the requests spread over them in turn (each precise EPP follows every
	// engine's events; each approximate one sees only what it routed itself).
	Routers []int
	// Lab also runs the comparison with real processes (PrefixLabTopologies): LabRequests
	// requests, one in LabDirect sent by a second router (0 = none), binaries from BinDir.
	Lab         bool
	LabRequests int
	LabDirect   int
	// LabDirectRoute is the second router: a second EPP and gateway (DirectRouter), or
	// straight to an engine (DirectPrefix, DirectRoundRobin).
	LabDirectRoute string
	// LabParallel runs both lab topologies at once (two subnets) instead of one after the other.
	LabParallel bool
	BinDir      string
	Workload    SharedPrefix
	Scrape      time.Duration
	Stdout      io.Writer
}

// PrefixRun is one policy's outcome.
type PrefixRun struct {
	Policy        string
	Routers       int
	Config        string
	Requests      int
	Served        int
	Failed        map[string]int
	PrefixHitRate float64
	TTFT, E2E     Dist
	// EPPCPUMicrosPerRequest includes ingesting the KV events (precise).
	EPPCPUMicrosPerRequest float64
	VirtualSeconds         float64
}

// PrefixData is prefix.json.
type PrefixData struct {
	Options   PrefixOptions
	Capacity  float64 // requests/s of the fleet at load 1 (no prefix-cache hits assumed)
	Rate      float64
	Runs      []PrefixRun
	Lab       []PrefixLabRun `json:",omitempty"`
	Generated time.Time
}

// NewPrefixCommand is `pdgate bench sim prefix`.
func NewPrefixCommand() *cobra.Command {
	o := PrefixOptions{Root: ".", Out: "bench-results/sim-prefix", Pods: 8, Requests: 20000, Load: 0.8, Seed: 1,
		Routers: []int{1, 2}, LabRequests: 3000, LabDirect: 2, LabDirectRoute: DirectRouter, LabParallel: true, BinDir: "bin", Workload: DefaultSharedPrefix, Scrape: 50 * time.Millisecond}
	cmd := &cobra.Command{
		Use:   "prefix",
		Short: "Precise vs approximate prefix-cache routing on a shared-prefix workload (same fleet, load and seed)",
		Long: `Runs prefix-approx (config/bench/prefix/approx.yaml: GIE's prefix-cache-scorer on where the EPP
sent prompts) and prefix-precise (config/bench/prefix/precise.yaml: llm-d's precise-prefix-cache-scorer
on the KV events the simulated engines emit as they store and evict blocks) over the same
shared-prefix chat workload (Zipf-popular system prompts / documents followed by fresh questions),
at the same offered load and seed, on a combined-only fleet, and prints p99 TTFT and the prefix-hit
rate (share of prompt tokens served from the prefilling pod's prefix cache) of both.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			ctrllog.SetLogger(logr.Discard())
			o.Stdout = c.OutOrStdout()
			_, err := RunPrefix(c.Context(), o)
			return err
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Out, "out", o.Out, "directory for prefix.json and prefix.md")
	fleetFlags(f, &o.Profile, &o.Scrape)
	f.IntVar(&o.Pods, "pods", o.Pods, "simulated GPUs (combined pods)")
	f.IntVar(&o.Requests, "requests", o.Requests, "requests per policy")
	f.Float64Var(&o.Load, "load", o.Load, "offered load as a fraction of the fleet's estimated capacity without prefix-cache hits")
	f.Int64Var(&o.Seed, "seed", o.Seed, "workload seed (the same for both policies)")
	f.IntSliceVar(&o.Routers, "routers", o.Routers, "router counts to run each policy with (independent EPPs sharing no state, requests spread over them in turn)")
	f.IntVar(&o.Workload.Prefixes, "prefixes", o.Workload.Prefixes, "distinct shared prefixes")
	f.Float64Var(&o.Workload.Zipf, "zipf", o.Workload.Zipf, "Zipf exponent of prefix popularity (> 1)")
	f.BoolVar(&o.Lab, "lab", false, "also run both policies in the lab (real processes from --bin-dir, config/lab/prefix/*.yaml; minutes)")
	f.IntVar(&o.LabRequests, "lab-requests", o.LabRequests, "requests per lab run")
	f.IntVar(&o.LabDirect, "lab-direct", o.LabDirect, "lab: one request in N goes through a second router sharing no state with the lab's EPP (0 = none)")
	f.StringVar(&o.LabDirectRoute, "lab-direct-route", o.LabDirectRoute, "lab: the second router: router (a second EPP and gateway of the same policy), or straight to an engine by prefix (affinity: the pod its system prompt hashes to) or round-robin")
	f.BoolVar(&o.LabParallel, "lab-parallel", o.LabParallel, "lab: run both topologies at once on two subnets, so the host's noise falls on both alike (false: one after the other)")
	f.StringVar(&o.BinDir, "bin-dir", o.BinDir, "binaries for --lab (make build)")
	return cmd
}

// RunPrefix runs both prefix policies and writes the report.
func RunPrefix(ctx context.Context, o PrefixOptions) (*PrefixData, error) {
	if o.Stdout == nil {
		o.Stdout = io.Discard
	}
	if !(o.Load > 0) || o.Pods < 1 || o.Requests < 1 {
		return nil, fmt.Errorf("bench sim prefix: --load, --pods and --requests must be > 0")
	}
	prof, err := loadProfile(Options{Root: o.Root, Profile: o.Profile})
	if err != nil {
		return nil, err
	}
	mp, mo := o.Workload.means()
	capacity := CapacityPerGPU(prof, mp, mo) * float64(o.Pods)
	d := &PrefixData{Options: o, Capacity: capacity, Rate: o.Load * capacity, Generated: time.Now().UTC()}
	fmt.Fprintf(o.Stdout, "shared-prefix workload: %d prefixes of %d-%d tokens (Zipf %.2f) + %d-%d-token questions; %d pods, load %.2f = %.1f req/s, %d requests, seed %d\n",
		o.Workload.Prefixes, o.Workload.PrefixTokens[0], o.Workload.PrefixTokens[1], o.Workload.Zipf, o.Workload.SuffixTokens[0],
		o.Workload.SuffixTokens[1], o.Pods, o.Load, d.Rate, o.Requests, o.Seed)
	for _, routers := range o.Routers {
		if routers < 1 {
			return nil, fmt.Errorf("--routers: %d is not a router count", routers)
		}
	}
	for _, routers := range o.Routers {
		for _, p := range PrefixPolicies {
			run, err := runPrefixPolicy(ctx, o, prof, p, routers, d.Rate)
			if err != nil {
				return nil, err
			}
			d.Runs = append(d.Runs, run)
		}
	}
	if o.Lab {
		runs, err := RunPrefixLab(ctx, o)
		if err != nil {
			return nil, err
		}
		d.Lab = runs
	}
	md := prefixMarkdown(d)
	fmt.Fprint(o.Stdout, md)
	if o.Out != "" {
		dir := o.Out
		if !filepath.IsAbs(dir) {
			dir = filepath.Join(o.Root, dir)
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("--out: %w", err)
		}
		js, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("prefix.json: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "prefix.json"), js, 0o644); err != nil {
			return nil, fmt.Errorf("prefix.json: %w", err)
		}
		if err := os.WriteFile(filepath.Join(dir, "prefix.md"), []byte(md), 0o644); err != nil {
			return nil, fmt.Errorf("prefix.md: %w", err)
		}
		fmt.Fprintf(o.Stdout, "report: %s\n", filepath.Join(dir, "prefix.md"))
	}
	return d, nil
}

// runPrefixPolicy runs one policy with routers EPPs over the seeded workload.
func runPrefixPolicy(ctx context.Context, o PrefixOptions, prof *costmodel.Profile, p Policy, routers int, rate float64) (PrefixRun, error) {
	if err := ctx.Err(); err != nil {
		return PrefixRun{}, err
	}
	src, err := NewSharedPrefixSource(o.Workload, prof.Model, rate, o.Seed, o.Requests)
	if err != nil {
		return PrefixRun{}, err
	}
	s, err := New(Config{Profile: prof, Pods: p.fleet(o.Pods, prof.Model), EPPConfig: p.configPath(o.Root),
		Model: prof.Model, Source: src, Scrape: o.Scrape, Routers: routers, Seed: o.Seed})
	if err != nil {
		return PrefixRun{}, fmt.Errorf("policy %s: %w", p.Name, err)
	}
	res, err := s.Run()
	if err != nil {
		return PrefixRun{}, fmt.Errorf("policy %s, %d routers: %w", p.Name, routers, err)
	}
	sum := res.Summary
	return PrefixRun{Policy: p.Name, Routers: routers, Config: p.Config, Requests: sum.Requests, Served: sum.Served,
		Failed: sum.Failed, PrefixHitRate: sum.PrefixHitRate, TTFT: sum.TTFT, E2E: sum.E2E,
		EPPCPUMicrosPerRequest: sum.EPPCPUMicrosPerRequest, VirtualSeconds: sum.VirtualSeconds}, nil
}

func prefixMarkdown(d *PrefixData) string {
	var b strings.Builder
	b.WriteString("| policy | routers | served | failed | prefix-hit rate | TTFT p50 (ms) | TTFT p90 (ms) | TTFT p99 (ms) | E2E p99 (ms) | EPP CPU/request (µs) |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range d.Runs {
		failed := 0
		for _, n := range r.Failed {
			failed += n
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %.1f %% | %.0f | %.0f | %.0f | %.0f | %.0f |\n", r.Policy, r.Routers, r.Served, failed,
			100*r.PrefixHitRate, r.TTFT.P50, r.TTFT.P90, r.TTFT.P99, r.E2E.P99, r.EPPCPUMicrosPerRequest)
	}
	if len(d.Lab) > 0 {
		b.WriteString("\nLab (real processes):\n\n" + prefixLabHeader)
		for _, r := range d.Lab {
			b.WriteString(r.row())
		}
	}
	return b.String()
}
