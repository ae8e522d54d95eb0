package simbench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
)

// Components are the lab run's own per-stage measurements (means in ms, diffs of the
// processes' histograms over the run): what the data path spends outside the engines is
// derived from them, not fitted to the end-to-end figure the calibration compares.
type Components struct {
	// PrefillEngineTTFT: arrival at the prefill simulator to its first token
	// (vllm:time_to_first_token_seconds on prefill pods).
	PrefillEngineTTFT float64 `json:"prefillEngineTTFT"`
	// DecodeEngineTTFT: arrival at the decode simulator (KV pull and transfer included) to
	// its first token.
	DecodeEngineTTFT float64 `json:"decodeEngineTTFT"`
	// SidecarPrefillLeg: the sidecar's prefill leg, request out to response in
	// (pdgate_sidecar_prefill_duration_seconds).
	SidecarPrefillLeg float64 `json:"sidecarPrefillLeg"`
	// SidecarHandoff: prefill response to the first decode body byte
	// (pdgate_sidecar_kv_handoff_seconds).
	SidecarHandoff float64 `json:"sidecarHandoff"`
	// ClientTTFTMean is the load generator's mean TTFT.
	ClientTTFTMean float64 `json:"clientTTFTMean"`
}

// Overheads derives the data path's costs from the components: a hop is half the sidecar's
// prefill leg beyond the prefill engine's own time (request out, response back); the route
// (gateway, ext_proc, EPP, ingress) is what the client waits beyond the sidecar's two legs
// and the two hops that carry the first token back. step is the per-step timer lag, derived
// by the caller from TPOT.
func (c Components) Overheads(step time.Duration) Overheads {
	hop := (c.SidecarPrefillLeg - c.PrefillEngineTTFT) / 2
	route := c.ClientTTFTMean - c.SidecarPrefillLeg - c.SidecarHandoff - 2*hop
	d := func(ms float64) time.Duration { return time.Duration(max(ms, 0) * float64(time.Millisecond)) }
	return Overheads{Route: d(route), Hop: d(hop), Step: step}
}

// RecordOptions is one lab recording.
type RecordOptions struct {
	Topology, BinDir, AzurePath, Workload string
	Requests, Concurrency                 int
	Seed                                  int64
	Subnet                                string
	Err                                   io.Writer
}

// RecordLab starts the real-process lab, drives the workload slice through its gateway with
// the load generator (as `pdgate lab --workload` does) and reads the stage histograms of the
// simulators and sidecars before and after.
func RecordLab(ctx context.Context, o RecordOptions) (*LabRecord, error) {
	l, err := lab.Start(ctx, lab.Options{Topology: o.Topology, BinDir: o.BinDir, Subnet: o.Subnet, Err: o.Err, Out: io.Discard})
	if err != nil {
		return nil, fmt.Errorf("start the lab: %w", err)
	}
	defer l.Stop()
	t := l.Plan.Topology
	gen, err := workload.New(o.Workload, workload.Options{Model: t.Model, Seed: o.Seed, AzureConvPath: o.AzurePath, TimeScale: t.TimeScale})
	if err != nil {
		return nil, err
	}
	idle, err := probeIdle(ctx, l, t.Model, t.TimeScale, idleProbes)
	if err != nil {
		return nil, err
	}
	before, err := scrapeStages(ctx, l.Plan)
	if err != nil {
		return nil, err
	}
	res, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: gen, MaxRequests: o.Requests, Concurrency: o.Concurrency,
		Duration: 30 * time.Minute, Trace: true, Classify: l.Plan.Classify})
	if err != nil {
		return nil, fmt.Errorf("lab workload: %w", err)
	}
	after, err := scrapeStages(ctx, l.Plan)
	if err != nil {
		return nil, err
	}
	// Everything is recorded in model time: the client and the sidecars measure wall time,
	// which the topology's time scale turns into model time; the simulators' own histograms
	// are on their model clock already.
	sc := t.TimeScale
	rec := &LabRecord{Topology: o.Topology, Workload: o.Workload, Requests: o.Requests, Seed: o.Seed,
		Concurrency: o.Concurrency, TimeScale: sc, Recorded: time.Now().UTC().Format(time.RFC3339)}
	rec.Summary.RequestsSent = res.RequestsSent
	lm := res.LatencyMS
	rec.Summary.LatencyMS.TTFT = labDist{Count: lm.TTFT.Count, P50: sc * lm.TTFT.P50, P90: sc * lm.TTFT.P90, P99: sc * lm.TTFT.P99}
	rec.Summary.LatencyMS.TPOT = labDist{Count: lm.TPOT.Count, P50: sc * lm.TPOT.P50, P90: sc * lm.TPOT.P90, P99: sc * lm.TPOT.P99}
	rec.Summary.LatencyMS.E2E = labDist{Count: lm.E2E.Count, P50: sc * lm.E2E.P50, P90: sc * lm.E2E.P90, P99: sc * lm.E2E.P99}
	mean := func(k string, scale float64) float64 {
		n := after[k+"_count"] - before[k+"_count"]
		if n <= 0 {
			return 0
		}
		return (after[k+"_sum"] - before[k+"_sum"]) / n * 1e3 * scale
	}
	rec.Components = &Components{PrefillEngineTTFT: mean("prefill:ttft", 1), DecodeEngineTTFT: mean("decode:ttft", 1),
		SidecarPrefillLeg: mean("sidecar:prefill", sc), SidecarHandoff: mean("sidecar:handoff", sc), ClientTTFTMean: sc * lm.TTFT.Mean}
	rec.IdleProbes = idle
	return rec, nil
}

// idleProbes is how many requests probeIdle sends one at a time.
const idleProbes = 15

// probeIdle sends requests one at a time to the idle lab (1000-token prompts of their own,
// two output tokens) and reads every stage around each, so each probe's components are one
// request's: the data path's own costs without queueing behind other requests.
func probeIdle(ctx context.Context, l *lab.Lab, model string, scale float64, n int) ([]Components, error) {
	var out []Components
	for i := range n {
		before, err := scrapeStages(ctx, l.Plan)
		if err != nil {
			return nil, err
		}
		res, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: &oneRequest{req: probeRequest(model, i)}, MaxRequests: 1,
			Concurrency: 1, Duration: time.Minute, KeepSamples: true})
		if err != nil {
			return nil, fmt.Errorf("idle probe %d: %w", i, err)
		}
		if len(res.Samples) != 1 || !res.Samples[0].OK {
			return nil, fmt.Errorf("idle probe %d: the request failed (%+v)", i, res.Samples)
		}
		after, err := scrapeStages(ctx, l.Plan)
		if err != nil {
			return nil, err
		}
		one := func(k string, scale float64) float64 {
			if after[k+"_count"]-before[k+"_count"] != 1 {
				return math.NaN()
			}
			return (after[k+"_sum"] - before[k+"_sum"]) * 1e3 * scale
		}
		c := Components{PrefillEngineTTFT: one("prefill:ttft", 1), DecodeEngineTTFT: one("decode:ttft", 1),
			SidecarPrefillLeg: one("sidecar:prefill", scale), SidecarHandoff: one("sidecar:handoff", scale),
			ClientTTFTMean: scale * res.Samples[0].TTFTMS}
		if math.IsNaN(c.PrefillEngineTTFT + c.SidecarPrefillLeg + c.SidecarHandoff) {
			continue // served without a prefill leg (a combined pick): no stages to split
		}
		out = append(out, c)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("idle probes: none of %d requests ran a prefill leg", n)
	}
	return out, nil
}

func probeRequest(model string, i int) workload.Request {
	body, _ := json.Marshal(map[string]any{"model": model, "prompt": workload.Text(rand.New(rand.NewSource(int64(1_000_003+i))), 1000),
		"max_tokens": 2, "ignore_eos": true, "stream": true, "stream_options": map[string]any{"include_usage": true}})
	return workload.Request{Kind: "idle-probe", Path: "/v1/completions", Body: body, Stream: true}
}

type oneRequest struct {
	req  workload.Request
	done bool
}

func (o *oneRequest) Next() (workload.Request, bool) {
	if o.done {
		return workload.Request{}, false
	}
	o.done = true
	return o.req, true
}

// MedianIdle is the per-component median of the idle probes.
func MedianIdle(ps []Components) Components {
	med := func(get func(Components) float64) float64 {
		v := make([]float64, 0, len(ps))
		for _, p := range ps {
			v = append(v, get(p))
		}
		sort.Float64s(v)
		if len(v) == 0 {
			return math.NaN()
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return Components{
		PrefillEngineTTFT: med(func(c Components) float64 { return c.PrefillEngineTTFT }),
		DecodeEngineTTFT:  med(func(c Components) float64 { return c.DecodeEngineTTFT }),
		SidecarPrefillLeg: med(func(c Components) float64 { return c.SidecarPrefillLeg }),
		SidecarHandoff:    med(func(c Components) float64 { return c.SidecarHandoff }),
		ClientTTFTMean:    med(func(c Components) float64 { return c.ClientTTFTMean }),
	}
}

// scrapeStages sums the stage histograms over the lab's pods, keyed "<where>:<what>_sum|_count".
func scrapeStages(ctx context.Context, plan *lab.Plan) (map[string]float64, error) {
	out := map[string]float64{}
	for _, p := range plan.Pods {
		role := "decode"
		if p.Role == lab.RolePrefill {
			role = "prefill"
		}
		if err := scrapeInto(ctx, "http://"+p.EngineAddr()+"/metrics", out, map[string]string{
			"vllm:time_to_first_token_seconds": role + ":ttft"}); err != nil {
			return nil, err
		}
		if p.HasSidecar() {
			if err := scrapeInto(ctx, "http://"+p.Endpoint()+"/sidecar/metrics", out, map[string]string{
				"pdgate_sidecar_prefill_duration_seconds": "sidecar:prefill",
				"pdgate_sidecar_kv_handoff_seconds":       "sidecar:handoff"}); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// scrapeInto adds the _sum and _count samples of the named histograms (every label set).
func scrapeInto(ctx context.Context, url string, out map[string]float64, names map[string]string) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("scrape %s: %w", url, err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name := line
		if i := strings.IndexAny(line, "{ "); i >= 0 {
			name = line[:i]
		}
		for metric, key := range names {
			for _, suffix := range []string{"_sum", "_count"} {
				if name != metric+suffix {
					continue
				}
				f := strings.Fields(line)
				v, err := strconv.ParseFloat(f[len(f)-1], 64)
				if err != nil {
					return fmt.Errorf("scrape %s: %q: %w", url, line, err)
				}
				out[key+suffix] += v
			}
		}
	}
	return sc.Err()
}
