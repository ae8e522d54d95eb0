package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// The lab's Prometheus is a real Prometheus server (Debian's `prometheus` package, or any
// binary given) scraping every process of the lab once a second, the way a cluster's Prometheus
// scrapes the pods: the EPPs' /metrics, each sidecar's /sidecar/metrics and each simulator's
// /metrics. Every series carries namespace="default" (the lab's pool namespace), as Kubernetes
// service discovery would add, so the dashboard's queries run unchanged.

// PrometheusScrapeInterval is how often the lab's Prometheus scrapes: short, so that a rate()
// over a few seconds of a short lab run has at least two samples.
const PrometheusScrapeInterval = time.Second

// prometheusJobs are the lab's scrape jobs; each reads its targets from a file in the run
// directory, so routers added later (StartRouter) are scraped without a restart.
var prometheusJobs = []struct{ job, path string }{
	{"epp", "/metrics"},
	{"sidecar", "/sidecar/metrics"},
	{"engine", "/metrics"},
}

// FindPrometheus returns the prometheus binary: bin when set, else `prometheus` on PATH.
func FindPrometheus(bin string) (string, error) {
	if bin == "" {
		bin = "prometheus"
	}
	p, err := exec.LookPath(bin)
	if err != nil {
		return "", fmt.Errorf("prometheus: %w (Debian: apt-get install prometheus; hack/install-test-deps.sh installs it)", err)
	}
	return p, nil
}

// prometheusProc writes the Prometheus configuration and target files into the run directory
// and returns the process that serves them on addr.
func (p *Plan) prometheusProc(bin, addr string) (ProcSpec, error) {
	dir := filepath.Join(p.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return ProcSpec{}, fmt.Errorf("prometheus: %w", err)
	}
	cfg := fmt.Sprintf("global:\n  scrape_interval: %s\n  scrape_timeout: %s\n  evaluation_interval: %s\nscrape_configs:\n",
		PrometheusScrapeInterval, PrometheusScrapeInterval, PrometheusScrapeInterval)
	for _, j := range prometheusJobs {
		cfg += fmt.Sprintf("- job_name: %s\n  metrics_path: %s\n  file_sd_configs:\n  - files: [%q]\n    refresh_interval: 1s\n",
			j.job, j.path, filepath.Join(dir, j.job+".json"))
	}
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o644); err != nil {
		return ProcSpec{}, fmt.Errorf("prometheus: %w", err)
	}
	var sidecars, engines []string
	for _, pod := range p.Pods {
		if pod.HasSidecar() {
			sidecars = append(sidecars, pod.Endpoint())
		}
		engines = append(engines, pod.EngineAddr())
		ranks, _ := pod.rankAddrs()
		engines = append(engines, ranks...)
	}
	for job, targets := range map[string][]string{"epp": {p.PrefillReleaseAddress()}, "sidecar": sidecars, "engine": engines} {
		if err := writePrometheusTargets(dir, job, targets); err != nil {
			return ProcSpec{}, err
		}
	}
	return ProcSpec{Name: "prometheus", Binary: bin, Args: []string{
		"--config.file=" + filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--log.level=warn",
	}, Health: "http://" + addr + "/-/ready"}, nil
}

// writePrometheusTargets replaces a job's target file in one rename, so that Prometheus never
// reads half of it.
func writePrometheusTargets(dir, job string, targets []string) error {
	b, err := json.Marshal([]map[string]any{{"targets": targets, "labels": map[string]string{"namespace": Namespace}}})
	if err != nil {
		return err
	}
	tmp := filepath.Join(dir, job+".json.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return fmt.Errorf("prometheus targets: %w", err)
	}
	if err := os.Rename(tmp, filepath.Join(dir, job+".json")); err != nil {
		return fmt.Errorf("prometheus targets: %w", err)
	}
	return nil
}

// addPrometheus appends the Prometheus server to the processes the lab starts.
func (l *Lab) addPrometheus(bin string) error {
	path, err := FindPrometheus(bin)
	if err != nil {
		return err
	}
	ports, err := freePorts(1)
	if err != nil {
		return err
	}
	addr := "127.0.0.1:" + strconv.Itoa(ports[0])
	spec, err := l.Plan.prometheusProc(path, addr)
	if err != nil {
		return err
	}
	l.procs = append(l.procs, spec)
	l.PrometheusURL, l.eppTargets = "http://"+addr, []string{l.Plan.PrefillReleaseAddress()}
	return nil
}

// addEPPScrapeTarget adds a router's EPP to the Prometheus the lab runs (none: nothing to do).
func (l *Lab) addEPPScrapeTarget(addr string) error {
	if l.PrometheusURL == "" {
		return nil
	}
	l.eppTargets = append(l.eppTargets, addr)
	return writePrometheusTargets(filepath.Join(l.Plan.Dir, "prometheus"), "epp", l.eppTargets)
}

// PromSeries is one series of an instant query's answer.
type PromSeries struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

// QueryPrometheus runs an instant PromQL query against the lab's Prometheus.
func (l *Lab) QueryPrometheus(ctx context.Context, query string) ([]PromSeries, error) {
	if l.PrometheusURL == "" {
		return nil, errors.New("the lab runs no Prometheus (start it with Options.Prometheus)")
	}
	u := l.PrometheusURL + "/api/v1/query?" + url.Values{"query": {query}, "time": {strconv.FormatInt(time.Now().Unix(), 10)}}.Encode()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("prometheus query: %w", err)
	}
	defer resp.Body.Close()
	var body struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []PromSeries `json:"result"`
		} `json:"data"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		return nil, fmt.Errorf("prometheus query %q: %w", query, err)
	}
	if body.Status != "success" {
		return nil, fmt.Errorf("prometheus query %q: %s", query, body.Error)
	}
	return body.Data.Result, nil
}
