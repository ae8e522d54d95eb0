package simbench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
	"github.com/pdgate/pdgate/plugins/lib/handoffcompat"
)

// `pdgate bench sim compat`: a fleet whose pods cannot all hand KV to each other (two transfer
// groups, two connectors, and a rolling revision change midway), routed by the same
// EndpointPickerConfig twice: with the pods' handoff labels hidden from the EPP (what the
// EPP did before it checked compatibility, and still does for pods that declare nothing) and
// with them shown. The simulation knows what every pod really is and marks each pair it is
// handed that could not exchange KV.
//
// An incompatible pair is simulated at the cost of a compatible one (prefill leg, transfer,
// decode) and counted as failed, not served: in production the transfer fails or the decode
// engine recomputes the prompt and the request is lost or late, while the load it put on the
// fleet is the same. So both runs carry the same load, and goodput compares like with like.

// handoffTruth marks a simulated pod's true handoff attributes: under this prefix plus the
// attribute's name, keys no plugin reads. handoffTruthMarker says a pod has them.
const (
	handoffTruth       = "sim.pdgate.io/handoff-"
	handoffTruthMarker = handoffTruth + "declared"
	// kindIncompatible is the workload kind a request gets once routed to a pair that could not
	// exchange KV.
	kindIncompatible = "incompatible-pair"
)

// CompatOptions configure `pdgate bench sim compat`.
type CompatOptions struct {
	Root, Out string
	Pods      int // prefill and decode pods alternate
	Requests  int
	Load      float64
	Seed      int64
	SLO       SLO
	Config    string // the EndpointPickerConfig both runs use
	Profile   string
	Azure     string
	// RolloutStart and RolloutEnd place the rolling revision change in the run, as fractions
	// of its arrivals' span.
	RolloutStart, RolloutEnd float64
	Stdout                   io.Writer
}

// CompatDefaults: 32 pods (4 handoff classes of 4 prefill and 4 decode pods), the recommended
// config, load 0.8, the rollout over the middle half of the run.
func CompatDefaults() CompatOptions {
	return CompatOptions{Root: ".", Out: "bench-results/sim-compat", Pods: 32, Requests: 20_000, Load: 0.8, Seed: 1,
		SLO: SLO{TTFT: time.Second, TPOT: 50 * time.Millisecond}, Config: "config/recommended.yaml",
		Azure: workload.DefaultAzureConvPath, RolloutStart: 0.25, RolloutEnd: 0.75}
}

// CompatRun is one run's outcome.
type CompatRun struct {
	Name     string `json:"name"`
	Labelled bool   `json:"labelled"` // the EPP saw the handoff labels
	Sent     int    `json:"sent"`
	Served   int    `json:"served"` // served by a compatible pair, or without a prefill leg
	// IncompatiblePairs are requests the EPP sent to a pair that could not exchange KV.
	IncompatiblePairs int            `json:"incompatiblePairs"`
	Failed            map[string]int `json:"failed,omitempty"`
	Replaced          int            `json:"replaced"` // pods rolled from revision a to b
	// Goodput is the share of sent requests served by a compatible pair (or with no prefill
	// leg) within both SLOs; GoodputIfHarmless would be the share if incompatible pairs
	// worked (an upper bound on what the fleet could do while mispairing).
	Goodput           float64 `json:"goodput"`
	GoodputIfHarmless float64 `json:"goodputIfHarmless"`
	// CompatibleGoodput is the share of the requests served by compatible pairs (or with no
	// prefill leg) that met both SLOs: how well the compatible part of the fleet served.
	CompatibleGoodput float64 `json:"compatibleGoodput"`
	TTFT              Dist    `json:"ttft"`
	TPOT              Dist    `json:"tpot"`
	// Phases split the run at the rollout: before it, during it, after it (by arrival).
	Phases [3]CompatPhase `json:"phases"`
}

// CompatPhase is goodput over the requests that arrived in one phase of the run.
type CompatPhase struct {
	Sent int `json:"sent"`
	// Goodput counts only requests served by a compatible pair (or with no prefill leg);
	// IfHarmless counts every served request, as if mispairs worked.
	Goodput    float64 `json:"goodput"`
	IfHarmless float64 `json:"ifHarmless"`
}

// compatPhaseNames name CompatRun.Phases.
var compatPhaseNames = [3]string{"before the rollout", "during it", "after it"}

// phaseOf is the phase of an arrival at fraction f of the run's span. By time, not by arrival
// number: the trace's arrivals are not stationary (the Azure trace has a burst at 35-60 % of
// its span), so the rollout and the burst overlap by time only.
func (o CompatOptions) phaseOf(f float64) int {
	switch {
	case f < o.RolloutStart:
		return 0
	case f < o.RolloutEnd:
		return 1
	}
	return 2
}

// timedSource remembers when each arrival came: at[k] is the arrival the simulation numbers k+1.
type timedSource struct {
	Source
	at []time.Duration
}

func (t *timedSource) Next() (Arrival, bool) {
	a, ok := t.Source.Next()
	if ok {
		t.at = append(t.at, a.At)
	}
	return a, ok
}

// CompatReport is what `bench sim compat` writes to compat.json.
type CompatReport struct {
	Options CompatOptions `json:"options"`
	Rate    float64       `json:"rate"`
	Runs    []CompatRun   `json:"runs"`
	// Same is the paired comparison: the requests the unchecked router happened to serve by
	// a compatible pair, and the goodput each router gave those very requests. The unchecked
	// run's CompatibleGoodput is over a sample that the mispairing chose (fewer requests
	// during the rollout, when a random pair is least often compatible); this one is not.
	Same SameRequests `json:"sameRequests"`
}

// SameRequests is goodput over one set of requests in both runs.
type SameRequests struct {
	Requests  int     `json:"requests"`
	Unchecked float64 `json:"unchecked"`
	Checked   float64 `json:"checked"`
}

// pairedGoodput compares the runs over the requests unchecked served compatibly: met[id]
// says whether request id met both SLOs in a run (absent: not served compatibly).
func pairedGoodput(unchecked, checked map[int]bool) SameRequests {
	var out SameRequests
	var goodU, goodC int
	for id, ok := range unchecked {
		out.Requests++
		if ok {
			goodU++
		}
		if checked[id] {
			goodC++
		}
	}
	if out.Requests > 0 {
		out.Unchecked = float64(goodU) / float64(out.Requests)
		out.Checked = float64(goodC) / float64(out.Requests)
	}
	return out
}

// NewCompatCommand is `pdgate bench sim compat`.
func NewCompatCommand() *cobra.Command {
	o := CompatDefaults()
	cmd := &cobra.Command{
		Use:   "compat",
		Short: "Compatibility-checked pairing: incompatible P/D pairs and goodput with handoff labels hidden from and shown to the EPP",
		Long: `Runs the virtual-time fleet with two KV transfer groups and two KV connectors (four handoff
classes) and a rolling revision change over the middle of the run (every pod of revision a is
replaced by one of revision b, one at a time), under one EndpointPickerConfig (default the
recommended one), twice: with the pods' handoff labels hidden from the EPP, which then pairs as it
did before it checked compatibility, and with them shown. Counts the pairs that could not exchange
KV and the goodput of the requests that were served by compatible pairs.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error { return runCompatCommand(c, o) },
	}
	o.flags(cmd.Flags())
	return cmd
}

// flags binds the options: the fleet and the run, then goodput and the rollout, then files.
func (o *CompatOptions) flags(f *pflag.FlagSet) {
	f.IntVar(&o.Pods, "pods", o.Pods, "simulated GPUs (prefill and decode alternate; a multiple of 8 gives every handoff class both roles)")
	f.IntVar(&o.Requests, "requests", o.Requests, "requests per run")
	f.Float64Var(&o.Load, "load", o.Load, "offered load as a fraction of the fleet's estimated capacity")
	f.Int64Var(&o.Seed, "seed", o.Seed, "workload and EPP seed")
	o.sloFlags(f)
	f.StringVar(&o.Config, "config", o.Config, "EndpointPickerConfig both runs route with")
	f.StringVar(&o.Profile, "profile", "", "cost profile (default config/sim/llama3-8b-h100.yaml)")
	f.StringVar(&o.Azure, "azure-conv", o.Azure, "Azure conversation trace CSV")
	f.StringVar(&o.Out, "out", o.Out, "directory for compat.json")
}

func (o *CompatOptions) sloFlags(f *pflag.FlagSet) {
	f.DurationVar(&o.SLO.TTFT, "slo-ttft", o.SLO.TTFT, "goodput: TTFT target")
	f.DurationVar(&o.SLO.TPOT, "slo-tpot", o.SLO.TPOT, "goodput: TPOT target")
	f.Float64Var(&o.RolloutStart, "rollout-start", o.RolloutStart, "the rolling revision change starts at this fraction of the run's arrivals")
	f.Float64Var(&o.RolloutEnd, "rollout-end", o.RolloutEnd, "and ends at this fraction")
}

func runCompatCommand(c *cobra.Command, o CompatOptions) error {
	// plugins log through controller-runtime's logger; per-request logs are not the output
	ctrllog.SetLogger(logr.Discard())
	o.Stdout = c.OutOrStdout()
	_, err := RunCompat(c.Context(), o)
	return err
}

// RunCompat runs both fleets and prints (and writes) the comparison.
func RunCompat(ctx context.Context, o CompatOptions) (*CompatReport, error) {
	if o.Stdout == nil {
		o.Stdout = os.Stdout
	}
	if o.Pods < 8 || o.Requests <= 0 || o.Load <= 0 || !(0 <= o.RolloutStart && o.RolloutStart <= o.RolloutEnd && o.RolloutEnd <= 1) {
		return nil, fmt.Errorf("bench sim compat: want --pods >= 8, --requests > 0, --load > 0 and 0 <= rollout start <= end <= 1")
	}
	base := Options{Root: o.Root, Profile: o.Profile}
	prof, err := loadProfile(base)
	if err != nil {
		return nil, err
	}
	rows, err := workload.LoadAzureFile(base.path(o.Azure))
	if err != nil {
		return nil, fmt.Errorf("--azure-conv: %w", err)
	}
	mp, mo := azureMeans(rows)
	rep := &CompatReport{Options: o, Rate: o.Load * CapacityPerGPU(prof, mp, mo) * float64(o.Pods)}
	fmt.Fprintf(o.Stdout, "compat fleet: %d pods in 4 handoff classes (transfer groups g0/g1 x connectors nixl/mooncake), revision a rolled to b from %.0f %% to %.0f %% of the run; %s at load %.2f (%.0f req/s), %d requests\n",
		o.Pods, 100*o.RolloutStart, 100*o.RolloutEnd, o.Config, o.Load, rep.Rate, o.Requests)
	met := make([]map[int]bool, 2)
	for k, labelled := range []bool{false, true} {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		run, m, err := compatRun(o, prof, rows, rep.Rate, labelled)
		if err != nil {
			return nil, err
		}
		met[k] = m
		fmt.Fprintf(o.Stdout, "%-34s incompatible pairs %6d of %d  goodput %.3f (%.3f if mispairs were harmless; %.3f of the compatibly served)  TTFT p50/p99 %.0f/%.0f ms  TPOT p50/p99 %.1f/%.1f ms  failed %v\n",
			run.Name, run.IncompatiblePairs, run.Sent, run.Goodput, run.GoodputIfHarmless, run.CompatibleGoodput, run.TTFT.P50, run.TTFT.P99, run.TPOT.P50, run.TPOT.P99, run.Failed)
		for i, ph := range run.Phases {
			fmt.Fprintf(o.Stdout, "    %-20s %5d sent  goodput %.3f (%.3f if mispairs were harmless)\n", compatPhaseNames[i], ph.Sent, ph.Goodput, ph.IfHarmless)
		}
		rep.Runs = append(rep.Runs, run)
	}
	rep.Same = pairedGoodput(met[0], met[1])
	fmt.Fprintf(o.Stdout, "the %d requests the unchecked router served by a compatible pair: goodput %.3f unchecked, %.3f checked\n",
		rep.Same.Requests, rep.Same.Unchecked, rep.Same.Checked)
	if o.Out != "" {
		path := filepath.Join(base.path(o.Out), "compat.json")
		b, err := json.MarshalIndent(rep, "", "  ")
		if err == nil {
			err = os.MkdirAll(filepath.Dir(path), 0o755)
		}
		if err == nil {
			err = os.WriteFile(path, b, 0o644)
		}
		if err != nil {
			return nil, fmt.Errorf("write %s: %w", path, err)
		}
	}
	return rep, nil
}

// compatRun runs one fleet; met says, for each request served compatibly (by arrival
// number), whether it met both SLOs.
func compatRun(o CompatOptions, prof *costmodel.Profile, rows []workload.AzureRow, rate float64, labelled bool) (run CompatRun, met map[int]bool, err error) {
	name := "labels hidden (pairing unchecked)"
	if labelled {
		name = "labels shown (pairing checked)"
	}
	azure, err := NewAzureSource(rows, rate, o.Seed, o.Requests, 0)
	if err != nil {
		return CompatRun{}, nil, err
	}
	src := &timedSource{Source: azure}
	// The revision-b pods exist from the start but join the EPP's pool only as the rollout
	// reaches them (a surge: each joins as its revision-a twin leaves).
	pods := append(CompatFleet(o.Pods, prof.Model, "a", labelled), compatFleetAt(o.Pods, o.Pods, prof.Model, "b", labelled)...)
	cfg := Config{Profile: prof, Pods: pods, EPPConfig: Options{Root: o.Root}.path(o.Config),
		Model: prof.Model, Source: src, Seed: o.Seed}
	s, err := New(cfg)
	if err != nil {
		return CompatRun{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	span := time.Duration(float64(o.Requests) / rate * float64(time.Second))
	roll := s.rollRevision(o.Pods, time.Duration(o.RolloutStart*float64(span)), time.Duration(o.RolloutEnd*float64(span)))
	res, err := s.Run()
	if err != nil {
		return CompatRun{}, nil, fmt.Errorf("%s: %w", name, err)
	}
	run = CompatRun{Name: name, Labelled: labelled, Sent: res.sent, Failed: res.failed, Replaced: *roll,
		GoodputIfHarmless: res.Goodput(o.SLO), TTFT: res.Summary.TTFT, TPOT: res.Summary.TPOT}
	good := 0
	met = map[int]bool{}
	phase := func(id int) int { return o.phaseOf(float64(src.at[id-1]) / float64(span)) }
	var phaseGood, phaseHarmless [3]int
	for i, k := range res.kinds {
		ph, ok := phase(res.ids[i]), res.good(i, o.SLO)
		if ok {
			phaseHarmless[ph]++
		}
		if k == kindIncompatible {
			run.IncompatiblePairs++
			continue
		}
		run.Served++
		met[res.ids[i]] = ok
		if ok {
			good++
			phaseGood[ph]++
		}
	}
	for id := range src.at {
		run.Phases[phase(id+1)].Sent++
	}
	for i := range run.Phases {
		if n := run.Phases[i].Sent; n > 0 {
			run.Phases[i].Goodput = float64(phaseGood[i]) / float64(n)
			run.Phases[i].IfHarmless = float64(phaseHarmless[i]) / float64(n)
		}
	}
	if res.sent > 0 {
		run.Goodput = float64(good) / float64(res.sent)
	}
	if run.Served > 0 {
		run.CompatibleGoodput = float64(good) / float64(run.Served)
	}
	return run, met, nil
}

// compatClass is pod i's transfer group and connector: consecutive prefill/decode pairs share
// one, and the four classes repeat every eight pods.
func compatClass(i int) (group, connector string) {
	return fmt.Sprintf("g%d", (i/2)%2), []string{"nixl", "mooncake"}[(i/4)%2]
}

// CompatFleet is n pods, prefill and decode alternating, labelled for llm-d without rolesets
// (so they pair across the fleet), in four handoff classes, all of one revision. The truth is
// always recorded for the simulation; labelled shows it to the EPP too.
func CompatFleet(n int, model, revision string, labelled bool) []PodSpec {
	return compatFleetAt(0, n, model, revision, labelled)
}

// compatFleetAt is CompatFleet named and addressed from index first on (a second revision of
// the same fleet).
func compatFleetAt(first, n int, model, revision string, labelled bool) []PodSpec {
	out := make([]PodSpec, n)
	for i := range out {
		role := RolePrefill
		if i%2 == 1 {
			role = RoleDecode
		}
		out[i] = fleetPod(first+i, role, model)
		group, conn := compatClass(i)
		out[i].Labels[handoffTruthMarker] = "true"
		for a, v := range map[handoffcompat.Attr]string{handoffcompat.TransferGroup: group, handoffcompat.Connector: conn, handoffcompat.Revision: revision} {
			out[i].Labels[handoffTruth+a.String()] = v
			if labelled {
				out[i].Labels[handoffcompat.Keys[a]] = v
			}
		}
	}
	return out
}

// truthOf is what a simulated pod really declares (the zero Spec for pods without a truth).
func truthOf(p *pod) handoffcompat.Spec {
	var s handoffcompat.Spec
	if p == nil || p.spec.Labels[handoffTruthMarker] == "" {
		return s
	}
	for _, a := range handoffcompat.Attrs {
		if v := p.spec.Labels[handoffTruth+a.String()]; v != "" {
			s = s.With(a, v)
		}
	}
	return s
}

// checkHandoff marks a request the EPP sent to a pair that could not exchange KV (arrive calls
// it once the pair is known).
func (s *Sim) checkHandoff(r *request) {
	if r.prefill != nil && !handoffcompat.Compatible(truthOf(r.prefill), truthOf(r.decode)) {
		r.a.Kind = kindIncompatible
	}
}

// rollRevision makes the first n pods the EPP's pool and then, one at a time in fleet order
// between from and to, swaps pod i out for pod n+i (its successor of the same role and class):
// the old pod leaves the pool and drains its requests. It returns the count of pods swapped,
// filled as the run goes.
func (s *Sim) rollRevision(n int, from, to time.Duration) *int {
	swapped := new(int)
	pool := append([]*pod(nil), s.pods[:n]...)
	publish := func() {
		for _, e := range s.epps {
			e.pool.set(pool)
		}
	}
	publish()
	step := (to - from) / time.Duration(max(n, 1))
	for i := range n {
		s.clock.AfterFunc(from+time.Duration(i)*step, func() {
			pool[i] = s.pods[n+i]
			pool[i].scrape(s.now())
			publish()
			*swapped++
		})
	}
	return swapped
}
