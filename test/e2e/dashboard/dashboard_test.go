// Package dashboard checks the operator's dashboard against a real Prometheus: each lab runs
// Debian's prometheus server scraping every EPP, sidecar and simulator, traffic and faults go
// through the gateway, and every PromQL query of config/dashboards/pdgate.json must return
// data, with no exceptions. Two labs cover it: the recommended configuration under load, and
// an SGLang lab built to reach the failure and load paths that one never takes
// (faultlab_test.go). The failure counters must also be above 0 after the run.
package dashboard

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/lab"
	"github.com/pdgate/pdgate/cmd/pdgate/loadgen"
	"github.com/pdgate/pdgate/cmd/pdgate/workload"
	"github.com/pdgate/pdgate/test/testsupport"
	"github.com/pdgate/pdgate/test/testsupport/labtest"
)

const repoRoot = "../../.."

// panelQuery is one target of one dashboard panel.
type panelQuery struct {
	panel, expr string
}

// dashboardQueries reads every PromQL expression of the dashboard, with its panel's title.
func dashboardQueries(t *testing.T) []panelQuery {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot, "config/dashboards/pdgate.json"))
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	var out []panelQuery
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			if tg.Expr != "" {
				out = append(out, panelQuery{p.Title, tg.Expr})
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("dashboard has no queries")
	}
	return out
}

// grafanaVars replaces the dashboard's Grafana variables the way Grafana would for the lab:
// every namespace, and a rate window that spans several of the lab's 1 s scrapes.
var grafanaVars = strings.NewReplacer(`"$namespace"`, `".*"`, "$namespace", ".*", "$__rate_interval", "30s")

func prometheusBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("prometheus")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skipf("no prometheus on PATH (hack/install-test-deps.sh installs Debian's): %v", err)
		}
		t.Fatalf("CI is set but prometheus is not installed: %v", err)
	}
	return p
}

// recommendedTopology is the default lab's pods (two P/D rolesets and a combined pod) under
// config/recommended.yaml: the token-load ledger, remaining-work routing, combined overflow.
func recommendedTopology(t *testing.T) string {
	t.Helper()
	return labtest.WriteTopology(t, labtest.DefaultTopology(t, map[string]string{
		"eppConfig": filepath.Join(testsupport.RepoRoot(), "config/recommended.yaml")}))
}

// failures sends requests that must fail, each with its defined status.
func failures(t *testing.T, l *lab.Lab) {
	t.Helper()
	model := l.Plan.Topology.Model
	sidecar := ""
	for _, pod := range l.Plan.Pods {
		if pod.Role == "decode" {
			sidecar = pod.Endpoint()
			break
		}
	}
	for _, tc := range []struct {
		name, url, body string
		headers         map[string]string
		want            int
	}{
		{"malformed JSON", l.URL + "/v1/completions", `{"model": "` + model + `", "prompt": `, nil, http.StatusBadRequest},
		{"unknown model", l.URL + "/v1/completions", `{"model": "no-such-model", "prompt": "hello", "max_tokens": 4}`, nil, http.StatusNotFound},
		{"prefill target outside the allow-list", "http://" + sidecar + "/v1/completions", `{"model": "` + model + `", "prompt": "hello", "max_tokens": 4}`,
			map[string]string{"x-prefiller-host-port": "192.0.2.1:8000"}, http.StatusForbidden},
	} {
		status, _, _ := testsupport.PostJSON(t, tc.url, tc.headers, tc.body)
		if status != tc.want {
			t.Errorf("%s: status %d, want %d", tc.name, status, tc.want)
		}
	}
}

// sampler records which dashboard queries returned data, over every lab and sample.
type sampler struct {
	queries []panelQuery
	hasData map[string]bool
}

// sample runs every query against the lab's Prometheus. Gauges of work in flight (the
// ledger's per-pod tokens) exist while there is work: a query passes when it returns data in
// any sample, under load or after it.
func (s *sampler) sample(ctx context.Context, t *testing.T, l *lab.Lab, when string) {
	t.Helper()
	for _, q := range s.queries {
		series, err := l.QueryPrometheus(ctx, grafanaVars.Replace(q.expr))
		if err != nil {
			t.Errorf("panel %q (%s): %v", q.panel, when, err)
			continue
		}
		s.hasData[q.expr] = s.hasData[q.expr] || len(series) > 0
	}
}

// requireCounted fails the test unless metric's series in the lab's Prometheus add up to more
// than 0: a failure path that ran but whose increment is broken leaves a series at 0 or none.
func requireCounted(ctx context.Context, t *testing.T, l *lab.Lab, metric string) {
	t.Helper()
	series, err := l.QueryPrometheus(ctx, "sum("+metric+")")
	if err != nil {
		t.Errorf("%s: %v", metric, err)
		return
	}
	if len(series) == 0 {
		t.Errorf("%s: no series after the run", metric)
		return
	}
	raw, _ := series[0].Value[1].(string)
	v, err := strconv.ParseFloat(raw, 64)
	if err != nil || !(v > 0) {
		t.Errorf("%s = %q after the run, want > 0", metric, raw)
		return
	}
	t.Logf("%s = %g", metric, v)
}

// The dashboard's queries run against two labs, each scraped by its own Prometheus: the
// recommended configuration under load (recommended), and a lab built to reach what that one
// does not (faultlab_test.go: the deprecated pd-profile-handler, the Redis-shared ledger, a
// short ledger TTL, AIBrix's fast paths and combined overflow, and the simulator's faults).
// Every query must return data from one of them.
func TestEveryDashboardQueryReturnsData(t *testing.T) {
	prom := prometheusBinary(t)
	s := &sampler{queries: dashboardQueries(t), hasData: map[string]bool{}}
	t.Run("recommended", func(t *testing.T) { recommendedRun(t, prom, s) })
	t.Run("faults", func(t *testing.T) { faultLabRun(t, prom, s) })
	var empty []string
	for _, q := range s.queries {
		if !s.hasData[q.expr] {
			empty = append(empty, q.panel+": "+grafanaVars.Replace(q.expr))
		}
	}
	if len(empty) > 0 {
		t.Fatalf("%d of %d dashboard queries return no data from either lab's Prometheus:\n  %s", len(empty), len(s.queries), strings.Join(empty, "\n  "))
	}
	t.Logf("all %d dashboard queries returned data", len(s.queries))
}

// recommendedRun drives the recommended lab: mixed traffic, Prefer: if-available traffic, the
// answers the EPP and a sidecar refuse, and a prefill the sidecar retries.
func recommendedRun(t *testing.T, prom string, s *sampler) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	l := labtest.Start(t, lab.Options{Topology: recommendedTopology(t), Subnet: "127.0.47", Prometheus: prom})

	wopts := workload.Options{Model: l.Plan.Topology.Model, Seed: 1, TimeScale: l.Plan.Topology.TimeScale}
	gen, err := workload.New("mixed", wopts)
	if err != nil {
		t.Fatal(err)
	}
	conditional, err := workload.New("conditional", wopts)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var res *loadgen.Result
	var runErr error
	go func() {
		defer close(done)
		res, runErr = loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: gen, Duration: 20 * time.Second, Rate: 12, Concurrency: 16, Trace: true, Classify: l.Plan.Classify})
	}()
	time.Sleep(12 * time.Second)
	s.sample(ctx, t, l, "under load")
	<-done
	if runErr != nil {
		t.Fatal(runErr)
	}
	t.Logf("traffic: %d requests, statuses %v", res.RequestsSent, res.ResponsesByStatus)
	// Prefer: if-available traffic (the conditional-decode gate), then the answers operators
	// must see counted: a body the EPP refuses, a model nobody serves, a prefill target
	// outside a sidecar's allow-list, a prefill the sidecar retries.
	cres, err := loadgen.Run(ctx, loadgen.Config{URL: l.URL, Gen: conditional, MaxRequests: 40, Concurrency: 4, Trace: true, Classify: l.Plan.Classify})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("conditional traffic: %d requests, statuses %v, %d answered 412", cres.RequestsSent, cres.ResponsesByStatus, cres.Conditional412)
	failures(t, l)
	prefillRetried(t, l)
	// Two more scrapes after the last request, so that every rate() sees the increase.
	time.Sleep(3 * lab.PrometheusScrapeInterval)
	s.sample(ctx, t, l, "after the load")
	requireCounted(ctx, t, l, "pdgate_sidecar_prefill_retries_total")
}

// prefillRetried sends a request whose prefill leg fails (the simulator's prefill-fail fault,
// on every attempt): the vLLM sidecar retries it once before its failure policy applies.
func prefillRetried(t *testing.T, l *lab.Lab) {
	t.Helper()
	// Long and never sent before, so that the EPP gives it a prefill leg.
	prompt := strings.Repeat("A prefill that fails is retried once before the policy applies. ", 40)
	status, hdr, _ := testsupport.PostJSON(t, l.URL+"/v1/completions", map[string]string{"x-sim-fault": "prefill-fail"},
		map[string]any{"model": l.Plan.Topology.Model, "prompt": prompt, "max_tokens": 4})
	t.Logf("prefill-fail: status %d, prefill outcome %q, cause %q", status, hdr.Get("x-pdgate-prefill-outcome"), hdr.Get("x-error-pd-cause"))
	if status == http.StatusOK && hdr.Get("x-pdgate-prefill-outcome") == "ok" {
		t.Errorf("a request whose every prefill failed answered 200 with prefill outcome ok")
	}
}
