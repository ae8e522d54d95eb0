package memory

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/epp"
	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// EPPResult is one EPP's memory over the session/prefix load.
type EPPResult struct {
	Name       string          `json:"name"`
	Kind       eppharness.Kind `json:"kind"`
	ConfigFile string          `json:"configFile,omitempty"`
	Endpoints  int             `json:"endpoints"`
	// Idle is the memory once every endpoint was scraped, before any request.
	Idle eppharness.Memory `json:"idle"`
	// After is the memory after the load (RSS now, HWM the peak over the whole run).
	After eppharness.Memory `json:"after"`
	// Samples are RSS readings during the load: requests sent so far and bytes resident.
	Samples []Sample `json:"samples"`
	// Requests sent, routed, failed; Sessions is pdgate_token_load_sessions after the load (-1
	// where the EPP has no ledger).
	Requests     int    `json:"requests"`
	OK           int    `json:"ok"`
	Errors       int    `json:"errors"`
	Sessions     int    `json:"sessions"`
	PrefixBlocks int64  `json:"prefixBlocks"`
	CPU          string `json:"eppCpu"`
	Wall         string `json:"loadWall"`
	// HeapProfile is the EPP's heap profile after the load, next to the report.
	HeapProfile string `json:"heapProfile,omitempty"`
	Error       string `json:"error,omitempty"`
}

// Sample is one reading during a load.
type Sample struct {
	X   int   `json:"x"`
	RSS int64 `json:"rssBytes"`
}

// eppRun measures stock GIE's EPP (default config, every pod serves whole requests) and
// pdgate's EPP (the given config over AIBrix rolesets) on the same number of endpoints and
// the same requests, one after the other through one control plane.
func eppRun(ctx context.Context, o Options, root, dir string) ([]EPPResult, error) {
	hosts, err := eppharness.LoopbackAddresses(o.Endpoints)
	if err != nil {
		return nil, err
	}
	ms, err := eppharness.StartModelServers(hosts, 0, eppharness.EngineMetrics{})
	if err != nil {
		return nil, err
	}
	defer ms.Close()
	o.logf("starting kube-apiserver + etcd (envtest)")
	cluster, err := eppharness.StartCluster(eppharness.ClusterOptions{WorkDir: dir})
	if err != nil {
		return nil, err
	}
	defer func() { _ = cluster.Stop() }()
	type run struct {
		name, layout, file string
		kind               eppharness.Kind
		primary            int
	}
	runs := []run{{"gie-default", "plain", "", eppharness.KindStockGIE, o.Endpoints}}
	for _, f := range o.ConfigFiles {
		runs = append(runs, run{configName(f), "aibrix", f, eppharness.KindPdgate, o.Endpoints / 2})
	}
	var out []EPPResult
	for _, r := range runs {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		res := EPPResult{Name: r.name, Kind: r.kind, Endpoints: o.Endpoints, Sessions: -1, ConfigFile: r.file}
		cfg := r.file
		if cfg != "" && !filepath.IsAbs(cfg) {
			cfg = filepath.Join(root, cfg)
		}
		eps, _, err := epp.Layout(r.layout, r.primary, hosts, ms.Port)
		if err != nil {
			return out, err
		}
		if err := measureEPP(ctx, o, &res, eppharness.Options{Kind: r.kind, ConfigFile: cfg, Endpoints: eps,
			BinDir: o.BinDir, WorkDir: dir, Cluster: cluster, PoolName: r.name + "-mem", ReadyTimeout: 3 * time.Minute,
			// Info-level logs: the default (-v=2) writes several lines per request.
			ExtraArgs: []string{"--refresh-metrics-interval", o.ScrapeInterval.String(), "--v", "1"}}, ms); err != nil {
			res.Error = err.Error()
			o.logf("%s: %v", r.name, err)
		}
		out = append(out, res)
	}
	return out, nil
}

func measureEPP(ctx context.Context, o Options, res *EPPResult, eo eppharness.Options, ms *eppharness.ModelServers) error {
	logf, err := os.Create(filepath.Join(eo.WorkDir, eo.PoolName+".log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	eo.Log = logf
	base := ms.Snapshot()
	o.logf("%s: starting the EPP over %d endpoints", res.Name, len(eo.Endpoints))
	e, err := eppharness.Start(ctx, eo)
	if err != nil {
		return err
	}
	defer func() { _ = e.Stop() }()
	hosts := make([]string, 0, len(eo.Endpoints))
	for _, ep := range eo.Endpoints {
		hosts = append(hosts, ep.Address)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if err := ms.WaitScraped(wctx, base, 2, hosts...); err != nil {
		return fmt.Errorf("waiting for every endpoint to be scraped: %w", err)
	}
	if res.Idle, err = e.Memory(); err != nil {
		return err
	}
	res.Samples = append(res.Samples, Sample{X: 0, RSS: res.Idle.RSS})
	client, err := epp.Dial(e.GRPCAddr, o.Conns, extprocclient.DefaultChunkSize)
	if err != nil {
		return err
	}
	defer client.Close()
	gen := newRequests(o)
	var cpu time.Duration
	start := time.Now()
	deadline := time.Now().Add(o.MaxPhase)
	const steps = 10
	for s := 0; s < steps && ctx.Err() == nil; s++ {
		from, to := o.Sessions*s/steps, o.Sessions*(s+1)/steps
		if to == from {
			continue
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("load stopped after %d of %d requests: --max-phase %s reached", res.Requests, o.Sessions, o.MaxPhase)
		}
		lr, err := epp.RunLoad(ctx, client, epp.LoadSpec{Requests: to - from, Concurrency: o.Concurrency, MaxDuration: left,
			Make: func(i int) *epp.Exchange { return gen.exchange(from + i) }}, e.CPUTime)
		if err != nil {
			return err
		}
		res.Requests += lr.Requests
		cpu += lr.CPU
		res.OK += lr.OK
		res.Errors += lr.Requests - lr.OK
		if lr.FirstErr != "" && res.Error == "" {
			res.Error = "first failed exchange: " + lr.FirstErr
		}
		m, err := e.Memory()
		if err != nil {
			return err
		}
		res.Samples = append(res.Samples, Sample{X: res.Requests, RSS: m.RSS})
		o.logf("%s: %d requests, RSS %.1f MiB", res.Name, res.Requests, mib(m.RSS))
	}
	res.CPU = cpu.Round(10 * time.Millisecond).String()
	res.Wall = time.Since(start).Round(100 * time.Millisecond).String()
	res.PrefixBlocks = gen.blocks.Load()
	time.Sleep(2 * time.Second) // let in-flight end-of-request work finish
	if res.After, err = e.Memory(); err != nil {
		return err
	}
	// The heap profile says what the resident memory holds (go tool pprof -sample_index=inuse_space).
	if err := fetch(ctx, "http://"+e.MetricsAddr+"/debug/pprof/heap?gc=1", filepath.Join(eo.WorkDir, res.Name+"-heap.pprof")); err != nil {
		o.logf("%s: heap profile: %v", res.Name, err)
	} else {
		res.HeapProfile = res.Name + "-heap.pprof"
	}
	if eo.Kind == eppharness.KindPdgate {
		// A config without pd-token-ledger has no session table (and no such metric): -1.
		if n, err := scrapeGauge(ctx, "http://"+e.MetricsAddr+"/metrics", "pdgate_token_load_sessions"); err == nil {
			res.Sessions = int(n)
		} else {
			o.logf("%s: %v", res.Name, err)
		}
	}
	return nil
}

// configName names a pdgate run after its config file: "pdgate-<file name>", DNS-safe.
func configName(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	var b strings.Builder
	b.WriteString("pdgate-")
	for _, c := range strings.ToLower(base) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' {
			b.WriteRune(c)
		} else {
			b.WriteByte('-')
		}
	}
	return strings.TrimRight(b.String(), "-")
}

// requests builds the i-th request of a run: a shared system prompt and a user prompt of its
// own (distinct from its first bytes, so every block after the system prompt is new to the
// prefix index) under a session key of its own.
type requests struct {
	runes  int
	blocks atomic.Int64
}

// systemPrompt plus the space PromptText appends fills whole prefix blocks, so each user prompt
// starts a block of its own.
const systemPrompt = "You are a careful assistant. Answer from the documents given below."

var words = strings.Fields("the of report table figure quarter revenue growth margin region market " +
	"customer product service cost forecast plan risk team result section data value change year")

func newRequests(o Options) *requests {
	return &requests{runes: promptRunes(o.prefixBlocks(), o.Sessions)}
}

// prompt is the user prompt of request i (ASCII, so runes = bytes).
func (r *requests) prompt(i int) string {
	rng := rand.New(rand.NewPCG(uint64(i), 0x9e3779b97f4a7c15))
	var b strings.Builder
	b.WriteString(blockID(i))
	b.WriteString(": ")
	for b.Len() < r.runes {
		b.WriteString(words[rng.IntN(len(words))])
		b.WriteByte(' ')
	}
	return b.String()[:r.runes]
}

// blockID is i as four base-62 digits (unique below 62^4 ≈ 14.7 million): the user prompt's
// first block, which makes every block after it distinct from every other prompt's (the block
// hashes are chained).
func blockID(i int) string {
	const digits = "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	var b [4]byte
	for k := 3; k >= 0; k-- {
		b[k] = digits[i%62]
		i /= 62
	}
	return string(b[:])
}

// distinctBlocks is the number of prefix blocks of request i's prompt text (system, user,
// each followed by a space, as LLMRequestBody.PromptText joins them) that no other request
// shares: every block not wholly inside the shared system prompt.
func distinctBlocks(userRunes int) int {
	total := (len(systemPrompt) + 1 + userRunes + 1) / prefixBlockRunes
	shared := (len(systemPrompt) + 1) / prefixBlockRunes
	return total - shared
}

func (r *requests) exchange(i int) *epp.Exchange {
	user := r.prompt(i)
	body, _ := json.Marshal(map[string]any{"model": epp.Model, "max_tokens": 64, "messages": []map[string]string{
		{"role": "system", "content": systemPrompt}, {"role": "user", "content": user}}})
	r.blocks.Add(int64(distinctBlocks(len(user))))
	h := epp.RequestHeaders("mem-"+strconv.Itoa(i), len(body))
	h[protocol.HeaderSessionKey] = "session-" + strconv.Itoa(i)
	resp := epp.CompletionBody(i, len(systemPrompt)+len(user))
	return &epp.Exchange{Headers: h, Body: body, RespHeaders: epp.ResponseHeaders(len(resp)), RespBody: resp}
}

// scrapeGauge reads one unlabelled sample from a Prometheus text page.
func scrapeGauge(ctx context.Context, url, name string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("scraping %s: %w", url, err)
	}
	defer resp.Body.Close()
	return findSample(bufio.NewScanner(resp.Body), name)
}

func findSample(sc *bufio.Scanner, name string) (float64, error) {
	sc.Buffer(make([]byte, 0, 64<<10), 4<<20)
	for sc.Scan() {
		line := sc.Text()
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(rest), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("metric %s not found", name)
}

// fetch saves a GET of url to path.
func fetch(ctx context.Context, url, path string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: status %d", url, resp.StatusCode)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }
