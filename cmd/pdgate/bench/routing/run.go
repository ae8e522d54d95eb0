package routing

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// Options configure `pdgate bench routing`.
type Options struct {
	// Out is the report directory.
	Out string
	// Quick runs the short variant (make bench): QuickPolicies, azure at 80 % and the mix.
	Quick bool
	// BinDir holds sim, sidecar, epp and gateway.
	BinDir string
	// ConfigDir holds pd.yaml, combined.yaml and the policies' configs.
	ConfigDir string
	// AzureConv is the Azure conversation trace CSV.
	AzureConv string
	// TraceOffset and Requests select the trace slice every azure phase replays.
	TraceOffset, Requests int
	// MixedRequests is the number of requests of the mixed phase.
	MixedRequests int
	// Mooncake is a Mooncake trace JSONL ("" = no mooncake phase); MooncakeEvery keeps every
	// n-th conversation (workload.MooncakeConversations), MooncakeOffset and MooncakeRequests
	// select the slice of those rows replayed at MooncakeLoad.
	Mooncake                                        string
	MooncakeEvery, MooncakeOffset, MooncakeRequests int
	MooncakeLoad                                    float64
	// Loads are the azure phases' loads (fractions of the P/D fleet's capacity).
	Loads []float64
	// MixedLoad is the mixed phase's load (0: no mixed phase).
	MixedLoad float64
	// Policies to run (empty: all, or QuickPolicies with Quick).
	Policies []string
	// TimeScale is the simulators' model seconds per wall second.
	TimeScale float64
	// Gap is the idle model time after each phase.
	Gap time.Duration
	SLO SLO
	// SLOs are the named goodput SLOs (attainment and goodput per GPU); empty = the
	// interactive and relaxed SLOs derived from the cost profile.
	SLOs []report.SLO
	Seed int64
	// Subnet is the labs' loopback subnet ("127.x.y").
	Subnet string
	// Routers is the number of EPP replicas, each with its own gateway and no state shared
	// with the others (1: the lab's own); requests go round-robin over their gateways.
	Routers int
	// Err receives progress lines.
	Err io.Writer
}

// Validate checks the options, naming the flag at fault.
func (o *Options) Validate() error {
	var errs []error
	bad := func(f string, a ...any) { errs = append(errs, fmt.Errorf(f, a...)) }
	if o.Requests < 2 {
		bad("--requests: at least 2, got %d", o.Requests)
	}
	if o.TraceOffset < 0 {
		bad("--trace-offset: must be >= 0, got %d", o.TraceOffset)
	}
	if o.MixedLoad > 0 && o.MixedRequests < 1 {
		bad("--mixed-requests: at least 1 with a mixed phase, got %d", o.MixedRequests)
	}
	if len(o.Loads) == 0 && o.MixedLoad <= 0 && o.Mooncake == "" {
		bad("--loads: at least one phase is needed")
	}
	if o.Mooncake != "" {
		if o.MooncakeRequests < 2 || o.MooncakeOffset < 0 {
			bad("--mooncake-requests/--mooncake-offset: at least 2 rows from an offset >= 0, got %d from %d", o.MooncakeRequests, o.MooncakeOffset)
		}
		if o.MooncakeEvery < 1 {
			bad("--mooncake-every: at least 1 (every conversation), got %d", o.MooncakeEvery)
		}
		if !(o.MooncakeLoad > 0) || o.MooncakeLoad > 3 {
			bad("--mooncake-load: a fraction of capacity in (0, 3], got %g", o.MooncakeLoad)
		}
	}
	for _, l := range append(append([]float64(nil), o.Loads...), o.MixedLoad) {
		if l < 0 || l > 3 {
			bad("--loads/--mixed-load: loads are fractions of capacity in (0, 3], got %g", l)
		}
	}
	if !(o.TimeScale > 0) || o.TimeScale > 100 {
		bad("--time-scale: must be in (0, 100], got %g", o.TimeScale)
	}
	if o.Gap < 0 {
		bad("--phase-gap: must be >= 0, got %s", o.Gap)
	}
	if o.SLO.TTFT <= 0 || o.SLO.TPOT <= 0 {
		bad("--slo-ttft/--slo-tpot: must be > 0, got %s/%s", o.SLO.TTFT, o.SLO.TPOT)
	}
	if _, err := SelectPolicies(o.Policies); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Results are the bench's raw data (the report's JSON "data").
type Results struct {
	// Started is when the run began (the report itself is assembled at the end).
	Started       time.Time    `json:"started"`
	TimeScale     float64      `json:"timeScale"`
	SLO           SLO          `json:"slo"`
	SLOs          []report.SLO `json:"slos"`
	TraceSlice    [2]int       `json:"traceSlice"`
	AzureCapacity Capacity     `json:"azureCapacity"`
	MixedCapacity Capacity     `json:"mixedCapacity"`
	// MooncakeSlice and MooncakeCapacity describe the mooncake phase (with --mooncake).
	MooncakeSlice    [2]int         `json:"mooncakeSlice,omitempty"`
	MooncakeCapacity Capacity       `json:"mooncakeCapacity"`
	Phases           []Phase        `json:"phases"`
	Policies         []PolicyResult `json:"policies"`
	Goals            []Goal         `json:"goals"`
	FleetGPUs        map[string]int `json:"fleetGpus"`
}

// PolicyResult is one policy's run.
type PolicyResult struct {
	Policy Policy `json:"policy"`
	// Error is set when the policy's lab failed; its cells are then empty.
	Error string               `json:"error,omitempty"`
	Cells map[string]CellStats `json:"cells"`
	// LabCPUSeconds is the CPU time every lab process used while the phases ran; per request
	// it is the steadiest cost figure on a shared machine.
	LabCPUSeconds float64 `json:"labCpuSeconds"`
	// CPUByBinary splits LabCPUSeconds by binary (sim, sidecar, epp, gateway).
	CPUByBinary map[string]float64 `json:"cpuByBinary"`
	Requests    int                `json:"requests"`
	WallSeconds float64            `json:"wallSeconds"`
	// Goodput is the highest azure rate per GPU with >= 90 % attainment, by SLO name.
	Goodput map[string]report.MaxRate `json:"goodputPerGpu,omitempty"`
	// LoadAverage is the machine's 1-minute load average when the policy's phases ended
	// (other programs' load slows the simulated GPUs down: see the README).
	LoadAverage string `json:"loadAverage"`
}

// Run runs the bench and writes the report; it returns the Markdown report's path.
func Run(ctx context.Context, o Options) (string, error) {
	if o.Err == nil {
		o.Err = io.Discard
	}
	// --loads 0 runs no azure phase (a Mooncake-only or mixed-only run).
	o.Loads = slices.DeleteFunc(slices.Clone(o.Loads), func(l float64) bool { return l == 0 })
	if err := o.Validate(); err != nil {
		return "", err
	}
	policies, _ := SelectPolicies(o.Policies)
	started := time.Now().UTC()
	res, phases, err := Prepare(o)
	if err != nil {
		return "", err
	}
	res.Started = started
	o.SLOs = res.SLOs
	var sloNames []string
	for _, s := range res.SLOs {
		sloNames = append(sloNames, s.String())
	}
	fmt.Fprintf(o.Err, "goodput SLOs: %s\n", strings.Join(sloNames, "; "))
	fmt.Fprintf(o.Err, "capacity (cost model, model time): azure slice %.1f req/s P/D, %.1f combined; mix %.1f P/D, %.1f combined\n",
		res.AzureCapacity.PDRPS, res.AzureCapacity.CombinedRPS, res.MixedCapacity.PDRPS, res.MixedCapacity.CombinedRPS)
	reqs, _ := Schedule(phases, o.Gap, o.TimeScale)
	for _, p := range policies {
		if ctx.Err() != nil {
			return "", ctx.Err()
		}
		fmt.Fprintf(o.Err, "policy %s: %d requests over %s of wall time...\n", p.Name, len(reqs),
			reqs[len(reqs)-1].At.Round(time.Second))
		pr := runPolicy(ctx, o, p, reqs, phases)
		if pr.Error != "" {
			fmt.Fprintf(o.Err, "policy %s failed: %s\n", p.Name, pr.Error)
		} else if c, ok := pr.Cells[phases[0].Name]; ok {
			fmt.Fprintf(o.Err, "policy %s: %s p99 TTFT %.0f ms, goodput %.2f; lab CPU %.1f ms/request\n", p.Name, phases[0].Name,
				c.TTFT.P99, c.Goodput, 1000*pr.LabCPUSeconds/float64(max(pr.Requests, 1)))
		}
		pr.Goodput = GoodputPerGPU(res, pr)
		for _, s := range res.SLOs {
			if m, ok := pr.Goodput[s.Name]; ok {
				fmt.Fprintf(o.Err, "policy %s: goodput %s %s req/s per GPU\n", p.Name, s.Name, m)
			}
		}
		res.Policies = append(res.Policies, pr)
	}
	res.Goals = EvaluateGoals(res)
	rep := BuildReport(res)
	return rep.Write(o.Out)
}

// Prepare loads the trace and the profile, derives the capacities and builds the phases.
func Prepare(o Options) (*Results, []Phase, error) {
	pd, err := lab.LoadTopology(filepath.Join(o.ConfigDir, "pd.yaml"))
	if err != nil {
		return nil, nil, err
	}
	comb, err := lab.LoadTopology(filepath.Join(o.ConfigDir, "combined.yaml"))
	if err != nil {
		return nil, nil, err
	}
	roles := map[string]int{}
	for _, t := range []*lab.Topology{pd, comb} {
		for _, p := range t.Pods {
			roles[p.Role] += p.Count
		}
	}
	gpusPD, gpusComb := roles[lab.RolePrefill]+roles[lab.RoleDecode], roles[lab.RoleCombined]
	if gpusPD != gpusComb || roles[lab.RolePrefill] == 0 || roles[lab.RoleDecode] == 0 {
		return nil, nil, fmt.Errorf("fleets: pd.yaml needs prefill and decode pods only, combined.yaml as many combined pods (got %d P/D, %d combined)", gpusPD, gpusComb)
	}
	prof, err := costmodel.Load(pd.Path(pd.SimProfile))
	if err != nil {
		return nil, nil, fmt.Errorf("sim profile: %w", err)
	}
	rows, err := workload.LoadAzureFile(o.AzureConv)
	if err != nil {
		return nil, nil, fmt.Errorf("--azure-conv: %w", err)
	}
	slice, err := AzureSlice(rows, o.TraceOffset, o.Requests)
	if err != nil {
		return nil, nil, fmt.Errorf("--trace-offset/--requests: %w", err)
	}
	res := &Results{TimeScale: o.TimeScale, SLO: o.SLO, SLOs: o.SLOs, TraceSlice: [2]int{o.TraceOffset, o.TraceOffset + o.Requests},
		FleetGPUs: map[string]int{FleetPD: gpusPD, FleetCombined: gpusComb}}
	nP, nD := roles[lab.RolePrefill], roles[lab.RoleDecode]
	if res.AzureCapacity, err = FleetCapacity(prof, AzureJobs(slice), nP, nD, gpusComb); err != nil {
		return nil, nil, err
	}
	if len(res.SLOs) == 0 {
		med, out := jobMedians(AzureJobs(slice))
		res.SLOs = DeriveSLOs(prof, med, out)
	}
	var phases []Phase
	if o.MixedLoad > 0 {
		mixed, err := MixedRequests(o.MixedRequests, pd.Model, o.Seed)
		if err != nil {
			return nil, nil, err
		}
		jobs := make([]Job, len(mixed))
		for i, r := range mixed {
			if jobs[i], err = RequestJob(r.Body); err != nil {
				return nil, nil, err
			}
		}
		if res.MixedCapacity, err = FleetCapacity(prof, jobs, nP, nD, gpusComb); err != nil {
			return nil, nil, err
		}
		phases = append(phases, MixedPhase(mixed, o.MixedLoad, o.MixedLoad*res.MixedCapacity.PDRPS, o.Seed))
	}
	phases = append(phases, AzurePhases(slice, o.Loads, res.AzureCapacity.PDRPS, pd.Model, o.Seed)...)
	if o.Mooncake != "" {
		ph, err := prepareMooncake(o, res, prof, pd.Model, nP, nD, gpusComb)
		if err != nil {
			return nil, nil, err
		}
		phases = append(phases, ph)
	}
	res.Phases = phases
	return res, phases, nil
}

// runPolicy starts the policy's lab, replays every phase through it and summarises.
func runPolicy(ctx context.Context, o Options, p Policy, reqs []workload.Request, phases []Phase) PolicyResult {
	pr := PolicyResult{Policy: p, Cells: map[string]CellStats{}}
	topo, err := writeTopology(o, p)
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	// Free ports are picked before the processes bind them, so another program on the
	// machine can take one in between: a failed start is retried twice.
	var l *lab.Lab
	for try := 1; ; try++ {
		l, err = lab.Start(ctx, lab.Options{Topology: topo, BinDir: o.BinDir, Dir: filepath.Join(o.Out, "runs", p.Name),
			Subnet: o.Subnet, Port: 0, ReadyTimeout: 90 * time.Second, Out: io.Discard, Err: o.Err})
		if err == nil {
			break
		}
		if try == 3 || ctx.Err() != nil {
			pr.Error = strings.Join(strings.Fields(err.Error()), " ")
			return pr
		}
		fmt.Fprintf(o.Err, "policy %s: lab start failed, retrying: %v\n", p.Name, err)
	}
	defer l.Stop()
	var replicas []string
	for i := 1; i < o.Routers; i++ {
		u, err := l.StartRouter(ctx)
		if err != nil {
			pr.Error = fmt.Sprintf("EPP replica %d: %v", i+1, err)
			return pr
		}
		replicas = append(replicas, u)
	}
	cpu0 := labCPU(l.Pids())
	pr.CPUByBinary = map[string]float64{}
	for name, v := range cpu0 {
		pr.CPUByBinary[name] = -v
	}
	start := time.Now()
	// The longest request of the trace (1,000 output tokens) must fit the bounds at any
	// tested load: 10 model minutes, in wall time.
	bound := time.Duration(float64(10*time.Minute) / o.TimeScale)
	r, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Replicas: replicas, Gen: workload.List(reqs), MaxRequests: len(reqs),
		Concurrency: 4096, Trace: true, Classify: l.Plan.Classify, KeepSamples: true,
		RequestTimeout: bound, DrainTimeout: bound})
	if err != nil {
		pr.Error = err.Error()
		return pr
	}
	pr.WallSeconds = time.Since(start).Seconds()
	for name, v := range labCPU(l.Pids()) {
		pr.CPUByBinary[name] += v
		pr.LabCPUSeconds += pr.CPUByBinary[name]
	}
	pr.Requests = r.RequestsSent
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(b)); len(f) > 0 {
			pr.LoadAverage = f[0]
		}
	}
	for _, ph := range phases {
		c := Summarize(r.Samples, ph.Name, o.TimeScale, o.SLO)
		c.Attainment = attainments(r.Samples, ph.Name, o.TimeScale, o.SLOs)
		pr.Cells[ph.Name] = c
	}
	return pr
}

// writeTopology renders the policy's fleet topology with absolute paths, the policy's
// EndpointPickerConfig and the bench's time scale into the run directory.
func writeTopology(o Options, p Policy) (string, error) {
	base := "pd.yaml"
	if p.Fleet == FleetCombined {
		base = "combined.yaml"
	}
	t, err := lab.LoadTopology(filepath.Join(o.ConfigDir, base))
	if err != nil {
		return "", err
	}
	abs := func(rel string) (string, error) {
		if rel == "" {
			return "", nil
		}
		return filepath.Abs(t.Path(rel))
	}
	cfgPath, err := filepath.Abs(filepath.Join(o.ConfigDir, p.Config))
	if err != nil {
		return "", err
	}
	t.EPPConfig = cfgPath
	t.TimeScale = o.TimeScale
	t.Name = t.Name + "-" + p.Name
	if t.SimProfile, err = abs(t.SimProfile); err != nil {
		return "", err
	}
	for i := range t.Pods {
		if t.Pods[i].Profile, err = abs(t.Pods[i].Profile); err != nil {
			return "", err
		}
	}
	b, err := yaml.Marshal(t)
	if err != nil {
		return "", fmt.Errorf("topology for %s: %w", p.Name, err)
	}
	dir := filepath.Join(o.Out, "topologies")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, p.Name+".yaml")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return "", err
	}
	return path, nil
}

// labCPU sums user+system CPU seconds of processes by binary name (Linux /proc; processes
// whose files cannot be read are left out).
func labCPU(pids []int) map[string]float64 {
	total := map[string]float64{}
	for _, pid := range pids {
		comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
		if err != nil {
			continue
		}
		s := string(b)
		// Fields after the command name (which may hold spaces) start after the last ')'.
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 13 {
			continue
		}
		u, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		total[strings.TrimSpace(string(comm))] += (u + st) / clockTicks
	}
	return total
}

// clockTicks is USER_HZ, 100 on every Linux architecture Go supports.
const clockTicks = 100
