package memory

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
)

// Results is everything one run measured (memory.json).
type Results struct {
	Sessions  int            `json:"sessions"`
	Endpoints int            `json:"endpoints"`
	Streams   int            `json:"streams"`
	EPP       []EPPResult    `json:"epp,omitempty"`
	EPPError  string         `json:"eppError,omitempty"`
	Sidecar   *SidecarResult `json:"sidecar,omitempty"`
	Goals     []Goal         `json:"goals"`
}

// Goal is one of the memory goals and whether this run met it.
type Goal struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Measured string `json:"measured"`
	Met      bool   `json:"met"`
}

// Run measures, writes <Out>/memory.{json,md} and the plots, and returns the results and the
// Markdown report's path.
func Run(ctx context.Context, o Options) (*Results, string, error) {
	if err := o.Validate(); err != nil {
		return nil, "", err
	}
	root, err := eppharness.RepoRoot()
	if err != nil {
		return nil, "", err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, "", err
	}
	dir, err := filepath.Abs(o.Out)
	if err != nil {
		return nil, "", err
	}
	r := report.New("memory", "Memory: EPP with 512 endpoints, sessions and a warm prefix index; sidecar with 1,000 streams")
	res := &Results{Sessions: o.Sessions, Endpoints: o.Endpoints, Streams: o.Streams}
	if !o.SkipSidecar {
		o.logf("sidecar: %d concurrent SSE streams", o.Streams)
		sc, err := sidecarRun(ctx, o, root, dir)
		if err != nil && sc.Error == "" {
			sc.Error = err.Error()
		}
		res.Sidecar = &sc
	}
	if !o.SkipEPP {
		eppRes, err := eppRun(ctx, o, root, dir)
		res.EPP = eppRes
		if err != nil {
			res.EPPError = err.Error()
		}
	}
	res.Goals = goals(res)
	buildReport(r, o, res)
	md, err := r.Write(dir)
	if err != nil {
		return res, "", err
	}
	return res, md, ctx.Err()
}

// goals judges each goal on the peak resident set (VmHWM), the figure a memory limit must
// cover, and says "not measured" where a part failed.
func goals(res *Results) []Goal {
	var out []Goal
	if res.EPPError != "" && len(res.EPP) == 0 {
		out = append(out, Goal{Name: "pdgate EPP peak RSS", Target: "≤ 256 MiB", Measured: "not measured: " + res.EPPError})
	}
	for _, e := range res.EPP {
		if e.Kind != eppharness.KindPdgate {
			continue
		}
		g := Goal{Name: fmt.Sprintf("%s EPP peak RSS, %d endpoints, %d requests/sessions", e.Name, res.Endpoints, res.Sessions),
			Target: "≤ 256 MiB", Measured: "not measured"}
		switch {
		case e.Error != "" && e.After.HWM == 0:
			g.Measured = "not measured: " + e.Error
		default:
			g.Measured = fmt.Sprintf("%.1f MiB (%s sessions recorded)", mib(e.After.HWM), sessionsText(e.Sessions))
			g.Met = e.After.HWM <= GoalEPPBytes && e.Error == ""
		}
		out = append(out, g)
	}
	if res.Sidecar != nil {
		s := res.Sidecar
		g := Goal{Name: fmt.Sprintf("sidecar peak RSS, %d concurrent SSE streams", s.Streams), Target: "≤ 128 MiB", Measured: "not measured"}
		if s.Held.HWM > 0 {
			g.Measured = fmt.Sprintf("%.1f MiB (%d of %d streams open)", mib(s.Held.HWM), s.Opened, s.Streams)
			g.Met = s.Held.HWM <= GoalSidecarBytes && s.Opened == s.Streams && s.Error == ""
		} else if s.Error != "" {
			g.Measured = "not measured: " + s.Error
		}
		out = append(out, g)
	}
	return out
}

func sessionsText(n int) string {
	if n < 0 {
		return "no"
	}
	return strconv.Itoa(n)
}

func metText(met bool) string {
	if met {
		return "met"
	}
	return "not met"
}

func buildReport(r *report.Report, o Options, res *Results) {
	r.Data = res
	gt := report.Table{Title: "Goals (judged on the peak resident set, VmHWM)", Columns: []string{"goal", "target", "measured", "status"}}
	for _, g := range res.Goals {
		gt.Rows = append(gt.Rows, []string{g.Name, g.Target, g.Measured, metText(g.Met)})
	}
	r.Add(report.Section{Title: "Goals", Tables: []report.Table{gt}})
	if res.EPP != nil || res.EPPError != "" {
		r.Add(eppSection(o, res))
	}
	if res.Sidecar != nil {
		r.Add(sidecarSection(res.Sidecar))
	}
}

func eppSection(o Options, res *Results) report.Section {
	t := report.Table{Title: "EPP resident memory", Columns: []string{"EPP", "config", "endpoints", "requests ok / sent",
		"sessions recorded", "prefix blocks sent (table fill)", "RSS idle MiB", "RSS after MiB", "peak MiB", "peak vs stock", "load wall", "EPP CPU"}}
	var base float64
	plot := report.Plot{File: "memory-epp-rss.png", Title: "EPP RSS while sessions and prompts arrive",
		XLabel: "requests sent (each a new session and prompt)", YLabel: "RSS (MiB)"}
	for _, e := range res.EPP {
		cfg := e.ConfigFile
		if cfg == "" {
			cfg = "GIE default"
		}
		sessions := "—"
		if e.Sessions >= 0 {
			sessions = strconv.Itoa(e.Sessions)
		}
		ratio := "1.00×"
		if e.Kind == eppharness.KindStockGIE {
			base = float64(e.After.HWM)
		} else if base > 0 {
			ratio = report.F(float64(e.After.HWM)/base, 2) + "×"
		} else {
			ratio = "—"
		}
		t.Rows = append(t.Rows, []string{e.Name, cfg, strconv.Itoa(e.Endpoints), fmt.Sprintf("%d / %d", e.OK, e.Requests),
			sessions, fmt.Sprintf("%d (%.0f %%)", e.PrefixBlocks, 100*prefixFill(e.PrefixBlocks)), report.F(mib(e.Idle.RSS), 1), report.F(mib(e.After.RSS), 1),
			report.F(mib(e.After.HWM), 1), ratio, e.Wall, e.CPU})
		s := report.Series{Name: e.Name}
		for _, p := range e.Samples {
			s.X = append(s.X, float64(p.X))
			s.Y = append(s.Y, mib(p.RSS))
		}
		if len(s.X) > 1 {
			plot.Series = append(plot.Series, s)
		}
	}
	text := fmt.Sprintf("Both EPPs run as real processes in Kubernetes mode against one local kube-apiserver, over %d idle "+
		"fake vLLM pods on loopback addresses, and receive the same %d chat requests over ext_proc (FULL_DUPLEX_STREAMED, "+
		"response phase included, %d streams in flight): each request carries a session key of its own (%s) and a prompt "+
		"of its own, sized so the prompts hold at least %d distinct prefix blocks (aibrix-pd-pair's prefix table holds %d). "+
		"Stock GIE uses its default config with every pod serving whole requests; pdgate uses each of %s over rolesets of 2 prefill "+
		"+ 2 decode pods. Which state a config keeps decides what the requests fill: token_load/hybrid_cache_load "+
		"prefill scoring records each session in pd-token-ledger, hybrid_cache_load and prefix_cache fill aibrix-pd-pair's "+
		"prefix table; the recommended config (token_load prefill and decode) keeps no prefix table. Both EPPs scrape pod metrics every %s (--refresh-metrics-interval; the binaries' 50 ms "+
		"default means 10,000 scrapes a second over 512 pods) and log at -v=1. \"sessions recorded\" is "+
		"pdgate_token_load_sessions after the load.",
		res.Endpoints, res.Sessions, o.Concurrency, "x-aibrix-session-key", o.prefixBlocks(),
		prefixTableCapacity, strings.Join(o.ConfigFiles, ", "), o.ScrapeInterval)
	for _, e := range res.EPP {
		if e.Error != "" {
			text += fmt.Sprintf("\n\n%s: %s", e.Name, e.Error)
		}
	}
	if res.EPPError != "" {
		text += "\n\nEPP part failed: " + res.EPPError
	}
	sec := report.Section{Title: "EPP", Text: text, Tables: []report.Table{t}}
	if len(plot.Series) > 0 {
		sec.Plots = []report.Plot{plot}
	}
	return sec
}

func sidecarSection(s *SidecarResult) report.Section {
	per := "—"
	if s.Opened > 0 && s.Held.RSS > s.Idle.RSS {
		per = report.F(float64(s.Held.RSS-s.Idle.RSS)/float64(s.Opened)/1024, 1)
	}
	t := report.Table{Title: "Sidecar resident memory", Columns: []string{"streams", "opened", "completed", "RSS idle MiB",
		"RSS held MiB", "peak MiB", "KiB per open stream"}}
	t.Rows = append(t.Rows, []string{strconv.Itoa(s.Streams), strconv.Itoa(s.Opened), strconv.Itoa(s.Completed),
		report.F(mib(s.Idle.RSS), 1), report.F(mib(s.Held.RSS), 1), report.F(mib(s.Held.HWM), 1), per})
	text := "The real sidecar binary proxies decode-only streaming chat requests (about 1.2 KB each) to a local engine " +
		"that sends one SSE chunk per stream and then holds every stream open; the client opens the streams in four " +
		"steps over HTTP/1.1 (one connection each), reading the sidecar's VmRSS after each step, then releases them " +
		"and checks every stream ends with data: [DONE]. The idle sidecar is the baseline."
	if s.Error != "" {
		text += "\n\nError: " + s.Error
	}
	plot := report.Plot{File: "memory-sidecar-rss.png", Title: "Sidecar RSS vs concurrent SSE streams",
		XLabel: "streams open", YLabel: "RSS (MiB)", Kind: report.Points}
	ser := report.Series{Name: "sidecar"}
	for _, p := range s.Samples {
		ser.X = append(ser.X, float64(p.X))
		ser.Y = append(ser.Y, mib(p.RSS))
	}
	sec := report.Section{Title: "Sidecar", Text: text, Tables: []report.Table{t}}
	if len(ser.X) > 1 {
		plot.Series = []report.Series{ser}
		sec.Plots = []report.Plot{plot}
	}
	return sec
}
