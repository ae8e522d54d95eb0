package epp

import (
	"fmt"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// Goal sizes and thresholds (docs/benchmarks.md, the request path's goals): with the full P/D plugin set, a net CPU efficiency of
// at least 1.0× stock GIE's at 1 KB and 16 KB (pdgate costs no more, though it runs two
// profiles), and at 220 KB at least 5× for the recommended and llm-d configs and 3× for
// aibrix-pd; the recommended config spreads a burst over equal pods with max/min ≤ 1.5.
const (
	goalLarge  = 220 << 10
	goalSpread = 1.5
	// goalTracing bounds what tracing on (every request sampled) may add to net CPU.
	goalTracing = 1.03
)

// tracingPair is one size of a config measured with tracing off and on in the same run.
type tracingPair struct {
	config  string
	off, on SizeResult
	spans   float64
}

func tracingPairs(res *Results) []tracingPair {
	var out []tracingPair
	for _, c := range res.Configs {
		if !c.Traced || c.Error != "" {
			continue
		}
		off, ok := configNamed(res, strings.TrimSuffix(c.Name, TracedSuffix))
		if !ok {
			continue
		}
		for _, on := range c.Sizes {
			if o, ok := sizeOf(off, on.Bytes); ok && o.NetCPUMS > 0 {
				out = append(out, tracingPair{config: c.Name, off: o, on: on, spans: c.SpansPerRequest})
			}
		}
	}
	return out
}

// sizeGoals are the efficiency goals per config, by body size.
func sizeGoals(config string) []struct {
	size  int
	ratio float64
} {
	large := 5.0
	if config == "aibrix-pd" {
		large = 3.0
	}
	return []struct {
		size  int
		ratio float64
	}{{1 << 10, 1.0}, {16 << 10, 1.0}, {goalLarge, large}}
}

// Goal is one goal's verdict.
type Goal struct {
	Config   string  `json:"config"`
	Goal     string  `json:"goal"`
	Measured float64 `json:"measured"`
	Target   float64 `json:"target"`
	Met      bool    `json:"met"`
	Note     string  `json:"note,omitempty"`
}

// cpuRatio is the goal figure: requests per EPP CPU-second relative to the baseline
// (baseline net CPU/request ÷ this config's). On a shared machine wall-clock req/s moves with
// the neighbours' load and with the client sharing the cores; CPU per request does not. Net
// CPU leaves out metric scraping, which depends on the pool size (the P/D pools have twice
// the pods), not on the request path.
func cpuRatio(base, x SizeResult) float64 { return base.NetCPUMS / x.NetCPUMS }

func grossCPURatio(base, x SizeResult) float64 {
	return base.Load.CPUPerRequestMS() / x.Load.CPUPerRequestMS()
}

func rpsRatio(base, x SizeResult) float64 { return x.Load.ReqPerSec() / base.Load.ReqPerSec() }

// configNamed returns the result of the config called name.
func configNamed(res *Results, name string) (ConfigResult, bool) {
	for _, c := range res.Configs {
		if c.Name == name && c.Error == "" {
			return c, true
		}
	}
	return ConfigResult{}, false
}

func sizeOf(c ConfigResult, bytes int) (SizeResult, bool) {
	for _, s := range c.Sizes {
		if s.Bytes == bytes {
			return s, true
		}
	}
	return SizeResult{}, false
}

// Goals evaluates the goals on the results; the first config is the baseline.
func Goals(res *Results) []Goal {
	var out []Goal
	if len(res.Configs) == 0 {
		return nil
	}
	base := res.Configs[0]
	for _, c := range res.Configs[1:] {
		if c.Kind == eppharness.KindFloor || c.Traced {
			continue // a reference, or measured against its untraced self below
		}
		for _, g := range sizeGoals(c.Name) {
			b, ok1 := sizeOf(base, g.size)
			x, ok2 := sizeOf(c, g.size)
			if !ok1 || !ok2 {
				continue
			}
			v := cpuRatio(b, x)
			out = append(out, Goal{Config: c.Name, Goal: fmt.Sprintf("CPU efficiency at %s ≥ %.1f× %s", sizeLabel(g.size), g.ratio, base.Name),
				Measured: v, Target: g.ratio, Met: v >= g.ratio && x.Load.OK == x.Load.Requests,
				Note: fmt.Sprintf("gross CPU ratio %s, req/s ratio %s", report.F(grossCPURatio(b, x), 2), report.F(rpsRatio(b, x), 2))})
		}
	}
	for _, t := range tracingPairs(res) {
		v := t.on.NetCPUMS / t.off.NetCPUMS
		out = append(out, Goal{Config: t.config, Goal: fmt.Sprintf("net CPU with tracing on at %s ≤ %.2f× off", sizeLabel(t.on.Bytes), goalTracing),
			Measured: v, Target: goalTracing, Met: v <= goalTracing && t.on.Load.OK == t.on.Load.Requests && t.spans > 0,
			Note: fmt.Sprintf("%s spans per request received", report.F(t.spans, 2))})
	}
	for _, c := range res.Configs {
		if c.Recommended && c.Burst != nil {
			out = append(out, Goal{Config: c.Name, Goal: fmt.Sprintf("burst max/min ≤ %.1f", goalSpread),
				Measured: c.Spread, Target: goalSpread, Met: c.Spread <= goalSpread && c.Burst.Errors == 0,
				Note: fmt.Sprintf("%d requests over %d equal pods", c.Burst.Requests, len(c.PrimaryPods))})
		}
	}
	return out
}

func metText(ok bool) string {
	if ok {
		return "met"
	}
	return "not met"
}

// build fills the report: request path, burst, memory, goals.
func build(r *report.Report, o Options, res *Results) {
	r.Data = struct {
		*Results
		Goals []Goal `json:"goals"`
	}{res, Goals(res)}
	r.Add(requestPathSection(o, res))
	if o.Burst > 0 {
		r.Add(burstSection(res))
	}
	r.Add(memorySection(res))
	if ts := tracingSection(res); ts != nil {
		r.Add(*ts)
	}
	var rows [][]string
	for _, g := range Goals(res) {
		rows = append(rows, []string{g.Config, g.Goal, report.F(g.Measured, 2), metText(g.Met), g.Note})
	}
	r.Add(report.Section{Title: "Goals",
		Text: "Throughput goals use net EPP CPU per request (requests per EPP CPU-second, relative to the " +
			"baseline, idle scraping excluded): the steady figure on a shared machine. The gross CPU and the " +
			"wall-clock req/s ratios are shown next to it.",
		Tables: []report.Table{{Columns: []string{"config", "goal", "measured", "verdict", "note"}, Rows: rows}}})
}

func requestPathSection(o Options, res *Results) report.Section {
	var errs []string
	cols := []string{"config", "pods", "body", "req/s", "EPP CPU ms/req", "net CPU ms/req", "± idle", "routing p50 ms", "routing p99 ms", "errors", "req/s × base", "CPU efficiency × base", "net CPU × floor", "net spread"}
	var rows [][]string
	base := res.Configs[0]
	floor, hasFloor := configNamed(res, FloorConfig)
	rps := report.Plot{File: "epp-throughput.png", Title: "ext_proc throughput per body size", XLabel: "body (KB)",
		YLabel: "requests/s", LogX: true, LogY: true, Kind: report.LinesPoints}
	cpu := report.Plot{File: "epp-cpu.png", Title: "EPP CPU per request (net of idle scraping)", XLabel: "body (KB)",
		YLabel: "CPU ms / request", LogX: true, LogY: true, Kind: report.LinesPoints}
	// gonum's log axes panic on a single x value (one --sizes entry): linear axes then.
	logAxes := len(o.Sizes) > 1
	rps.LogX, rps.LogY, cpu.LogX, cpu.LogY = logAxes, logAxes, logAxes, logAxes
	for _, c := range res.Configs {
		if c.Error != "" {
			errs = append(errs, fmt.Sprintf("* **%s** failed: `%s`", c.Name, firstLine(c.Error)))
		}
		rs, cs := report.Series{Name: c.Name}, report.Series{Name: c.Name}
		for _, s := range c.Sizes {
			b, ok := sizeOf(base, s.Bytes)
			rr, cr := math.NaN(), math.NaN()
			if ok {
				rr, cr = rpsRatio(b, s), cpuRatio(b, s)
			}
			xf := math.NaN()
			if f, ok := sizeOf(floor, s.Bytes); hasFloor && ok && f.NetCPUMS > 0 {
				xf = s.NetCPUMS / f.NetCPUMS
			}
			rows = append(rows, []string{c.Name, strconv.Itoa(c.Pods), sizeLabel(s.Bytes), report.F(s.Load.ReqPerSec(), 0),
				report.F(s.Load.CPUPerRequestMS(), 3), report.F(s.NetCPUMS, 3), idleErrCell(s), report.F(s.RoutingP50MS, 2), report.F(s.RoutingP99MS, 2),
				errCell(s.Load), report.F(rr, 2), report.F(cr, 2), report.F(xf, 2), spreadCell(s.NetCPURepeatsMS)})
			kb := float64(s.Bytes) / 1024
			rs.X, rs.Y = append(rs.X, kb), append(rs.Y, s.Load.ReqPerSec())
			cs.X, cs.Y = append(cs.X, kb), append(cs.Y, s.NetCPUMS)
		}
		rps.Series, cpu.Series = append(rps.Series, rs), append(cpu.Series, cs)
	}
	var cfgRows [][]string
	for _, c := range res.Configs {
		cfgRows = append(cfgRows, []string{c.Name, string(c.Kind), c.Loaded, layoutText(c), report.F(c.IdleCPUMSPerS, 1),
			strconv.FormatInt(c.Idle.Scrapes, 10), idlePerScrapeText(c.Idle)})
	}
	text := fmt.Sprintf("Real ext_proc gRPC over loopback, %d concurrent streams on %d HTTP/2 connections, "+
		"FULL_DUPLEX_STREAMED with %d KB body frames, response phase included (response headers + a JSON "+
		"completion with usage), OpenAI chat bodies; every EPP a real process in Kubernetes mode against a "+
		"local kube-apiserver (envtest) with idle fake vLLM pods scraped every 50 ms. EPP CPU = utime+stime "+
		"of the EPP process over the phase ÷ requests; net CPU subtracts the idle cost (metric scraping, "+
		"measured per scrape before the load) of the scrapes the pods served during the phase, and is what the "+
		"goals use; ± idle is the error that estimate carries into it (one standard error, from the idle "+
		"window's slices). Routing = "+
		"from the last request body frame sent to the routing reply (request headers response). "+
		"CPU efficiency × base = base net CPU/request ÷ this config's. Net CPU × floor = this config's "+
		"net CPU/request ÷ the floor's (`pdgate-bench floor-epp`: the same exchange answered with no "+
		"decision, every request to one pod), the distance to what the protocol alone costs.", o.Concurrency, o.Conns, o.ChunkSize>>10)
	if res.StreamEvents > 0 {
		text = strings.Replace(text, "a JSON completion with usage", fmt.Sprintf("a streamed answer: %d token events, "+
			"a usage event and [DONE], one body frame each, the requests asking stream: true", res.StreamEvents), 1)
	}
	if res.Meter == "instructions" {
		text += " " + instructionNote
	}
	if len(errs) > 0 {
		text += "\n\n" + strings.Join(errs, "\n")
	}
	return report.Section{Title: "EPP request path", Text: text,
		Tables: []report.Table{
			{Title: "Configs", Columns: []string{"config", "EPP", "config loaded", "pods", "idle CPU ms/s", "idle scrapes", "idle per scrape"}, Rows: cfgRows},
			{Title: "Per body size", Columns: cols, Rows: rows},
		},
		Plots: []report.Plot{rps, cpu}}
}

// tracingSection sets each traced config beside itself untraced, or is nil without one.
func tracingSection(res *Results) *report.Section {
	var rows [][]string
	for _, t := range tracingPairs(res) {
		rows = append(rows, []string{t.config, sizeLabel(t.on.Bytes), report.F(t.off.NetCPUMS, 3), report.F(t.on.NetCPUMS, 3),
			report.F(t.on.NetCPUMS/t.off.NetCPUMS, 3), report.F(t.spans, 2)})
	}
	if rows == nil {
		return nil
	}
	return &report.Section{Title: "Tracing on against off",
		Text: "A `" + TracedSuffix + "` config is the same EPP and config with tracing on: `--tracing=true`, " +
			"`OTEL_TRACES_SAMPLER=parentbased_always_on` (the bench sends no traceparent, so every request " +
			"is a sampled root: the worst case; `--trace-sample-ratio` below 1 samples that fraction instead) and the EPP's own batching span processor (telemetry.Batcher: " +
			"OTEL_BSP_* settings, 512-span batches, exporting every 1 s rather than 5 s) over OTLP gRPC to a real TraceService in the bench process. Each traced phase " +
			"ends only once the receiver has got nothing for 1.5 s, so every span's export counts in the phase " +
			"that made it; net CPU removes the idle scraping of that wait as of any other. Spans per request is " +
			"what the receiver got ÷ the requests sent.",
		Tables: []report.Table{{Columns: []string{"config", "body", "net off", "net on", "on ÷ off", "spans / request"}, Rows: rows}}}
}

// idleErrCell is the ± idle column: the idle estimate's error per request, "—" when the phase
// was charged per second (no scrapes to measure an error by).
func idleErrCell(s SizeResult) string {
	if s.NetCPUErrMS == 0 || math.IsNaN(s.NetCPUErrMS) {
		return "—"
	}
	return report.F(s.NetCPUErrMS, 3)
}

func layoutText(c ConfigResult) string {
	return fmt.Sprintf("%d (%d primary, layout %s)", c.Pods, len(c.PrimaryPods), c.Layout)
}

func errCell(l LoadResult) string {
	n := l.Requests - l.OK
	if n == 0 {
		return "0"
	}
	return fmt.Sprintf("%d (%s)", n, firstLine(l.FirstErr))
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 160 {
		s = s[:160] + "…"
	}
	return s
}

func burstSection(res *Results) report.Section {
	var rows [][]string
	for _, c := range res.Configs {
		if c.Burst == nil {
			continue
		}
		counts := make([]int, 0, len(c.PrimaryPods))
		for _, p := range c.PrimaryPods {
			counts = append(counts, c.Burst.Dest[p])
		}
		sort.Sort(sort.Reverse(sort.IntSlice(counts)))
		other := c.Burst.Requests - c.Burst.Errors
		cells := make([]string, len(counts))
		for i, n := range counts {
			other -= n
			cells[i] = strconv.Itoa(n)
		}
		rows = append(rows, []string{c.Name, strconv.Itoa(c.Burst.Requests), strings.Join(cells, ", "),
			strconv.Itoa(other), strconv.Itoa(c.Burst.Errors), report.F(c.Spread, 2)})
	}
	return report.Section{Title: "Burst spreading (through the EPP)",
		Text: "Back-to-back requests with distinct short prompts, each sent once the previous one was routed, " +
			"all kept in flight (no response) until the last was routed: a burst between two metric scrapes " +
			"(the fake pods report the same idle metrics at every scrape). Counted over the equal pods the " +
			"primary profile may pick; `other` = routed elsewhere. max/min = – when a pod got none.",
		Tables: []report.Table{{Columns: []string{"config", "requests", "per pod (sorted)", "other", "errors", "max/min"}, Rows: rows}}}
}

func memorySection(res *Results) report.Section {
	var rows [][]string
	mib := func(b int64) string { return report.F(float64(b)/(1<<20), 1) }
	baseRSS := int64(0)
	for i, c := range res.Configs {
		if i == 0 {
			baseRSS = c.Memory.RSS
		}
		rows = append(rows, []string{c.Name, strconv.Itoa(c.Pods), "after the load run", mib(c.Memory.RSS), mib(c.Memory.HWM),
			report.F(float64(c.Memory.RSS)/float64(baseRSS), 2)})
	}
	for i, m := range res.Memory {
		if i == 0 {
			baseRSS = m.Memory.RSS
		}
		note := "idle, every endpoint scraped twice"
		if m.Error != "" {
			note = "failed: " + firstLine(m.Error)
		}
		rows = append(rows, []string{m.Config, strconv.Itoa(m.Endpoints), note, mib(m.Memory.RSS), mib(m.Memory.HWM),
			report.F(float64(m.Memory.RSS)/float64(baseRSS), 2)})
	}
	return report.Section{Title: "EPP memory",
		Text:   "VmRSS and VmHWM (peak) of each EPP process from /proc/<pid>/status; × base = RSS ÷ stock GIE's in the same setting.",
		Tables: []report.Table{{Columns: []string{"config", "endpoints", "when", "RSS MiB", "peak MiB", "RSS × base"}, Rows: rows}}}
}
