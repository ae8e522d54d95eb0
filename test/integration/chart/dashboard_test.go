package chart

import (
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"

	"github.com/pdgate/pdgate/test/testsupport/kubetest"
)

// dashboardPanel is the part of a Grafana panel the test reads.
type dashboardPanel struct {
	Type       string `json:"type"`
	Title      string `json:"title"`
	Datasource *struct {
		UID string `json:"uid"`
	} `json:"datasource"`
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
}

// TestDashboard: every query of config/dashboards/*.json parses as PromQL and names only
// metrics that exist: pdgate_* in this repository's code, inference_* in GIE v1.5.0. A renamed
// metric breaks this test instead of leaving an empty panel. The minimum (decisions,
// conditional decode, ledger gauges, sidecar legs/latency/watchdog, GIE's metrics) is checked.
func TestDashboard(t *testing.T) {
	known := knownMetrics(t)
	files, _ := filepath.Glob(filepath.Join(repoRoot(t), "config", "dashboards", "*.json"))
	if len(files) == 0 {
		t.Fatal("no dashboards in config/dashboards")
	}
	nameRe := regexp.MustCompile(`\b(?:pdgate|inference_extension|inference_objective|inference_pool)_[a-z0-9_]+`)
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d struct {
			UID    string           `json:"uid"`
			Panels []dashboardPanel `json:"panels"`
		}
		if err := json.Unmarshal(data, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		used := map[string]bool{}
		for _, p := range d.Panels {
			if p.Type == "row" {
				continue
			}
			if p.Datasource == nil || p.Datasource.UID != "${datasource}" {
				t.Errorf("%s: panel %q must use the ${datasource} variable", filepath.Base(f), p.Title)
			}
			if len(p.Targets) == 0 {
				t.Errorf("%s: panel %q has no query", filepath.Base(f), p.Title)
			}
			for _, tg := range p.Targets {
				expr := strings.NewReplacer("$__rate_interval", "5m", "$namespace", ".*").Replace(tg.Expr)
				if _, err := parser.ParseExpr(expr); err != nil {
					t.Errorf("%s: panel %q: %q is not PromQL: %v", filepath.Base(f), p.Title, tg.Expr, err)
				}
				for _, m := range nameRe.FindAllString(tg.Expr, -1) {
					base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(m, "_bucket"), "_count"), "_sum")
					used[base] = true
					if !known[base] {
						t.Errorf("%s: panel %q queries %s, which no pdgate or GIE code exports", filepath.Base(f), p.Title, m)
					}
				}
			}
		}
		for _, want := range []string{"pdgate_disagg_decisions_total", "pdgate_conditional_decode_total",
			"pdgate_token_load_active_tokens", "pdgate_token_load_kv_tokens", "pdgate_token_load_decode_tokens",
			"pdgate_sidecar_legs_total", "pdgate_sidecar_prefill_duration_seconds", "pdgate_sidecar_decode_watchdog_total",
			"inference_extension_scheduler_e2e_duration_seconds", "inference_objective_request_total"} {
			if !used[want] {
				t.Errorf("%s: no panel shows %s", filepath.Base(f), want)
			}
		}
	}
}

// knownMetrics collects the metric names the code defines: "pdgate_..." string literals in
// this repository's Go sources, and GIE's Subsystem + Name pairs and literal descriptors.
func knownMetrics(t *testing.T) map[string]bool {
	t.Helper()
	known := map[string]bool{}
	lit := regexp.MustCompile(`"(pdgate_[a-z0-9_]+)"`)
	root := repoRoot(t)
	for _, dir := range []string{"plugins", "cmd"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, m := range lit.FindAllStringSubmatch(string(data), -1) {
				known[m[1]] = true
			}
			return nil
		})
	}
	gie, err := kubetest.GIEDir()
	if err != nil {
		t.Fatal(err)
	}
	consts := map[string]string{}
	constRe := regexp.MustCompile(`(?m)^\s*(\w+)\s*=\s*"(inference_[a-z_]+)"`)
	pairRe := regexp.MustCompile(`Subsystem:\s*(\w+),\s*Name:\s*"([a-z0-9_]+)"`)
	descRe := regexp.MustCompile(`"(inference_(?:pool|objective|extension)_[a-z0-9_]+)"`)
	var sources []string
	_ = filepath.WalkDir(filepath.Join(gie, "pkg", "epp"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			data, _ := os.ReadFile(p)
			sources = append(sources, string(data))
		}
		return nil
	})
	for _, src := range sources {
		for _, m := range constRe.FindAllStringSubmatch(src, -1) {
			consts[m[1]] = m[2]
		}
	}
	for _, src := range sources {
		for _, m := range pairRe.FindAllStringSubmatch(src, -1) {
			if sub, ok := consts[m[1]]; ok {
				known[sub+"_"+m[2]] = true
			}
		}
		for _, m := range descRe.FindAllStringSubmatch(src, -1) {
			known[m[1]] = true
		}
	}
	if !known["inference_objective_request_total"] || !known["inference_extension_scheduler_e2e_duration_seconds"] {
		t.Fatalf("could not read GIE's metric names from %s (found %d names)", gie, len(known))
	}
	return known
}
