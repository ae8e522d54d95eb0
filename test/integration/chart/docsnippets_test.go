package chart

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chartutil"
	"sigs.k8s.io/yaml"
)

var docYAMLBlock = regexp.MustCompile("(?ms)^```yaml\\n(.*?)^```")

// The Kubernetes guide's YAML snippets are things a user pastes: values snippets must render
// with the chart (schema and the chart's own checks included) on top of the values file the
// guide installs them with, and the HTTPRoute must point at the pool the guide installs.
func TestKubernetesGuideSnippets(t *testing.T) {
	text, err := os.ReadFile(filepath.Join(repoRoot(t), "docs", "kubernetes.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := docYAMLBlock.FindAllStringSubmatch(string(text), -1)
	if len(blocks) < 3 {
		t.Fatalf("found %d yaml blocks in docs/kubernetes.md, want at least 3", len(blocks))
	}
	defaults := loadChart(t).Values
	routes, snippets := 0, 0
	for i, b := range blocks {
		var doc map[string]any
		if err := yaml.Unmarshal([]byte(b[1]), &doc); err != nil {
			t.Errorf("block %d does not parse: %v", i+1, err)
			continue
		}
		if doc["kind"] == "HTTPRoute" {
			routes++
			checkGuideRoute(t, b[1])
			continue
		}
		snippets++
		for k := range doc {
			if _, ok := defaults[k]; !ok {
				t.Errorf("block %d: %q is not a value of the chart", i+1, k)
			}
		}
		base := values(t, []string{filepath.Join(repoRoot(t), "config", "samples", "vllm-pd.yaml")})
		if _, err := render(t, "docs", "llm", chartutil.CoalesceTables(doc, base)); err != nil {
			t.Errorf("block %d does not render with the chart:\n%s\n%v", i+1, b[1], err)
		}
	}
	if routes != 1 || snippets < 2 {
		t.Errorf("found %d HTTPRoutes and %d values snippets; the guide changed, update this test", routes, snippets)
	}
}

func checkGuideRoute(t *testing.T, text string) {
	t.Helper()
	var route struct {
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Rules []struct {
				BackendRefs []struct{ Group, Kind, Name string } `json:"backendRefs"`
			}
		}
	}
	if err := yaml.Unmarshal([]byte(text), &route); err != nil {
		t.Fatal(err)
	}
	// The guide installs `helm install pd-sim charts/pdgate -n pd-demo`: the pool is pd-sim.
	if route.Metadata.Namespace != "pd-demo" || len(route.Spec.Rules) == 0 || len(route.Spec.Rules[0].BackendRefs) != 1 {
		t.Fatalf("HTTPRoute: unexpected shape %+v", route)
	}
	ref := route.Spec.Rules[0].BackendRefs[0]
	if ref.Group != "inference.networking.k8s.io" || ref.Kind != "InferencePool" || ref.Name != "pd-sim" {
		t.Errorf("HTTPRoute backendRef %+v must name the InferencePool pd-sim (group inference.networking.k8s.io)", ref)
	}
	objs := mustRender(t, "pd-sim", "pd-demo", values(t, []string{filepath.Join(repoRoot(t), "config", "samples", "simulator-pd.yaml")}))
	if pool := lookup(objs, "InferencePool", "pd-sim"); pool == nil || !strings.HasPrefix(pool.GetAPIVersion(), ref.Group+"/") {
		t.Errorf("the chart does not render InferencePool pd-sim in %s (objects: %s)", ref.Group, kinds(objs))
	}
}
