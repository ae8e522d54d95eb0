package simbench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

// The lab side of the prefix comparison: real processes (bin/sim publishing KV events over
// ZeroMQ, sidecars, bin/epp, bin/gateway), the same shared-prefix workload. A share of the
// requests (--lab-direct) is routed by a second router sharing no state with the lab's EPP:
// by default a second real EPP and gateway of the same policy, or, without one, straight to
// an engine as a load-blind router would send them. The approximate EPP never learns those
// blocks, the precise one reads them from the engines' events.

// PrefixLabTopologies are the two lab topologies, identical but for the EndpointPickerConfig.
var PrefixLabTopologies = []struct{ Policy, Topology string }{
	{"prefix-approx", "config/lab/prefix/approx.yaml"},
	{"prefix-precise", "config/lab/prefix/precise.yaml"},
}

// prefixLabPods is the lab topologies' pod count (the offered rate scales with it).
const prefixLabPods = 4

// PrefixLabRun is one lab run.
type PrefixLabRun struct {
	Policy, Topology string
	Requests         int
	// Routed are the requests the lab's EPP routed, Direct those the second router sent.
	Routed, Direct loadgen.Percentiles
	// All is every request's TTFT, whichever router sent it.
	All    loadgen.Percentiles
	Failed int
	// PrefixHitRate is the engines' prefix-cache hit tokens over their prompt tokens.
	PrefixHitRate float64
	// Computed is each pod's prompt tokens prefilled (not served from its prefix cache), the
	// work routing spreads; Spread is its max over its mean (1 = even, 4 = all on one of 4).
	Computed []float64
	Spread   float64
}

// The simulator's counters: vllm:prompt_tokens_total counts the prompt tokens it computed
// (cmd/sim/server: PrefillDone), the hit counter those it served from its prefix cache.
const (
	metricComputedTokens = "vllm:prompt_tokens_total"
	metricHitTokens      = "pdgate_sim_prefix_cache_hit_tokens_total"
)

// engineDeltas fills the run's prefix-hit rate and per-pod prefill work from the engines'
// counters (one map per pod, in pod order) before and after it.
func (r *PrefixLabRun) engineDeltas(before, after []map[string]float64) {
	var computed, hits, most float64
	r.Computed = make([]float64, len(after))
	for k := range after {
		c := after[k][metricComputedTokens] - before[k][metricComputedTokens]
		computed, hits = computed+c, hits+after[k][metricHitTokens]-before[k][metricHitTokens]
		r.Computed[k] = c
		most = max(most, c)
	}
	if computed+hits > 0 {
		r.PrefixHitRate = hits / (computed + hits)
	}
	if computed > 0 {
		r.Spread = most / (computed / float64(len(after)))
	}
}

const prefixLabHeader = "| policy | requests | failed | prefix-hit rate | routed TTFT p50 (ms) | p90 | p99 | second router's TTFT p50 / p99 (ms) | all TTFT p99 (ms) | prefill tokens max/mean over pods |\n|---|---|---|---|---|---|---|---|---|---|\n"

func (r PrefixLabRun) row() string {
	return fmt.Sprintf("| %s | %d | %d | %.1f %% | %.0f | %.0f | %.0f | %.0f / %.0f | %.0f | %.2f |\n", r.Policy, r.Requests, r.Failed, 100*r.PrefixHitRate,
		r.Routed.P50, r.Routed.P90, r.Routed.P99, r.Direct.P50, r.Direct.P99, r.All.P99, r.Spread)
}

// chatRequests turns the seeded shared-prefix arrivals at rate req/s into OpenAI chat
// requests, each sent at its arrival time (the Poisson process bench sim replays), and gives
// each request's prefix key (a hash of its first message: the shared system prompt).
func chatRequests(w SharedPrefix, model string, rate float64, seed int64, n int) ([]workload.Request, []uint64, error) {
	src, err := NewSharedPrefixSource(w, model, rate, seed, n)
	if err != nil {
		return nil, nil, err
	}
	var out []workload.Request
	var keys []uint64
	for {
		a, ok := src.Next()
		if !ok {
			return out, keys, nil
		}
		h := fnv.New64a()
		h.Write([]byte(a.Body.ChatCompletions.Messages[0].Content.Raw))
		keys = append(keys, h.Sum64())
		var msgs []map[string]string
		for _, m := range a.Body.ChatCompletions.Messages {
			msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content.Raw})
		}
		body, err := json.Marshal(map[string]any{"model": model, "messages": msgs, "max_tokens": a.Output, "stream": true,
			"stream_options": map[string]any{"include_usage": true}})
		if err != nil {
			return nil, nil, err
		}
		out = append(out, workload.Request{At: a.At, Kind: "shared-prefix", Path: "/v1/chat/completions", Body: body, Stream: true})
	}
}

// Direct routes: how the second router (the direct traffic) picks an engine.
const (
	DirectRouter     = "router"      // a second EPP and gateway of the same policy
	DirectPrefix     = "prefix"      // prefix affinity: the pod its prefix key hashes to
	DirectRoundRobin = "round-robin" // the engines in turn
)

// splitDirect deals the requests out: every direct-th one (1 in direct; 0 = none) to an engine
// by route (keys[i] mod pods for DirectPrefix, in turn otherwise; all to perPod[0], the
// second router, for DirectRouter), perPod[k] for pod k, the others to routed, each list in
// arrival order.
func splitDirect(reqs []workload.Request, keys []uint64, route string, direct, pods int) (routed []workload.Request, perPod [][]workload.Request) {
	perPod = make([][]workload.Request, pods)
	for i, r := range reqs {
		if direct > 0 && pods > 0 && i%direct == direct-1 {
			k := (i / direct) % pods
			switch route {
			case DirectPrefix:
				k = int(keys[i] % uint64(pods))
			case DirectRouter:
				k = 0
			}
			perPod[k] = append(perPod[k], r)
		} else {
			routed = append(routed, r)
		}
	}
	return routed, perPod
}

// runPrefixLab runs one topology: every direct-th request (1/direct of them; 0 = none) goes
// to an engine in turn, the rest through the gateway, each at its arrival time.
func runPrefixLab(ctx context.Context, o PrefixOptions, topology, policy, subnet string, reqs []workload.Request, keys []uint64) (PrefixLabRun, error) {
	l, err := lab.Start(ctx, lab.Options{Topology: o.path(topology), BinDir: o.path(o.BinDir), Subnet: subnet, Err: o.Stdout, Out: io.Discard})
	if err != nil {
		return PrefixLabRun{}, fmt.Errorf("start the lab %s: %w", topology, err)
	}
	defer l.Stop()
	// targets[0] is the lab's gateway, then the second router's URL or every engine
	targets := []string{l.URL}
	if o.LabDirectRoute == DirectRouter && o.LabDirect > 0 { // no second router without its share
		url, err := l.StartRouter(ctx)
		if err != nil {
			return PrefixLabRun{}, err
		}
		targets = append(targets, url)
	} else {
		for _, p := range l.Plan.Pods {
			targets = append(targets, "http://"+p.EngineAddr())
		}
	}
	routed, perPod := splitDirect(reqs, keys, o.LabDirectRoute, o.LabDirect, len(targets)-1)
	before, err := scrapeCounters(ctx, l.Plan)
	if err != nil {
		return PrefixLabRun{}, err
	}
	type out struct {
		res *loadgen.Result
		err error
	}
	results := make([]out, len(targets))
	var wg sync.WaitGroup
	run := func(i int, url string, rs []workload.Request) {
		defer wg.Done()
		if len(rs) == 0 {
			return
		}
		res, err := loadgen.Run(ctx, loadgen.Config{URL: url, Gen: workload.List(rs), Concurrency: 256,
			MaxRequests: len(rs), KeepSamples: true})
		results[i] = out{res, err}
	}
	wg.Add(len(targets))
	go run(0, targets[0], routed)
	for k, url := range targets[1:] {
		go run(k+1, url, perPod[k])
	}
	wg.Wait()
	after, err := scrapeCounters(ctx, l.Plan)
	if err != nil {
		return PrefixLabRun{}, err
	}
	r := PrefixLabRun{Policy: policy, Topology: topology, Requests: len(reqs)}
	var directTTFT, allTTFT []time.Duration
	for i, x := range results {
		if x.err != nil {
			return PrefixLabRun{}, fmt.Errorf("lab %s: workload: %w", topology, x.err)
		}
		if x.res == nil {
			continue
		}
		for _, s := range x.res.Samples {
			if !s.OK {
				r.Failed++
				continue
			}
			ttft := time.Duration(s.TTFTMS * float64(time.Millisecond))
			allTTFT = append(allTTFT, ttft)
			if i > 0 {
				directTTFT = append(directTTFT, ttft)
			}
		}
		if i == 0 {
			r.Routed = x.res.LatencyMS.TTFT
		}
	}
	r.Direct, r.All = loadgen.Summarize(directTTFT), loadgen.Summarize(allTTFT)
	r.engineDeltas(before, after)
	return r, nil
}

// scrapeCounters reads every simulator's /metrics, one map per pod (samples summed by name).
func scrapeCounters(ctx context.Context, plan *lab.Plan) ([]map[string]float64, error) {
	var out []map[string]float64
	for _, p := range plan.Pods {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.EngineAddr()+"/metrics", nil)
		if err != nil {
			cancel()
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			cancel()
			return nil, fmt.Errorf("scrape %s: %w", p.Name, err)
		}
		m, err := lab.ParseMetrics(resp.Body)
		resp.Body.Close()
		cancel()
		if err != nil {
			return nil, fmt.Errorf("scrape %s: %w", p.Name, err)
		}
		out = append(out, m)
	}
	return out, nil
}

// RunPrefixLab runs both lab topologies over the same requests: at once on two subnets
// (o.LabParallel), so that the host's noise falls on both alike, or one after the other.
func RunPrefixLab(ctx context.Context, o PrefixOptions) ([]PrefixLabRun, error) {
	prof, err := loadProfile(Options{Root: o.Root, Profile: o.Profile})
	if err != nil {
		return nil, err
	}
	mp, mo := o.Workload.means()
	rate := o.Load * CapacityPerGPU(prof, mp, mo) * prefixLabPods
	if o.LabDirectRoute != DirectRouter && o.LabDirectRoute != DirectPrefix && o.LabDirectRoute != DirectRoundRobin {
		return nil, fmt.Errorf("--lab-direct-route: %q is not %s, %s or %s", o.LabDirectRoute, DirectRouter, DirectPrefix, DirectRoundRobin)
	}
	reqs, keys, err := chatRequests(o.Workload, prof.Model, rate, o.Seed, o.LabRequests)
	if err != nil {
		return nil, err
	}
	direct := "one router"
	switch {
	case o.LabDirect > 0 && o.LabDirectRoute == DirectRouter:
		direct = fmt.Sprintf("1 in %d through a second EPP and gateway of the same policy", o.LabDirect)
	case o.LabDirect > 0:
		direct = fmt.Sprintf("1 in %d straight to an engine (%s)", o.LabDirect, o.LabDirectRoute)
	}
	mode := "one after the other"
	if o.LabParallel {
		mode = "both topologies at once"
	}
	fmt.Fprintf(o.Stdout, "lab: %d combined pods (KV 100,000 tokens each), load %.2f = %.1f req/s, %d requests, %s, seed %d, %s\n",
		prefixLabPods, o.Load, rate, len(reqs), direct, o.Seed, mode)
	runs := make([]PrefixLabRun, len(PrefixLabTopologies))
	errs := make([]error, len(PrefixLabTopologies))
	var wg sync.WaitGroup
	for i, t := range PrefixLabTopologies {
		run := func() {
			runs[i], errs[i] = runPrefixLab(ctx, o, t.Topology, t.Policy, fmt.Sprintf("127.0.%d", 81+i), reqs, keys)
		}
		if !o.LabParallel {
			if run(); errs[i] != nil {
				return nil, errs[i]
			}
			continue
		}
		wg.Add(1)
		go func() { defer wg.Done(); run() }()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	fmt.Fprint(o.Stdout, prefixLabHeader)
	for _, r := range runs {
		fmt.Fprint(o.Stdout, r.row())
	}
	return runs, nil
}

func (o PrefixOptions) path(p string) string { return Options{Root: o.Root}.path(p) }
