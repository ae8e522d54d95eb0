package chart

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/strvals"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// repoRoot is the repository root, found from this file's location.
func repoRoot(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("cannot locate the test source")
	}
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", "..", ".."))
}

func chartDir(t testing.TB) string { return filepath.Join(repoRoot(t), "charts", "pdgate") }

// sampleFiles lists the documented values files (config/samples/*.yaml), sorted.
func sampleFiles(t testing.TB) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(repoRoot(t), "config", "samples", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files)
	if len(files) == 0 {
		t.Fatal("no values files in config/samples")
	}
	return files
}

func loadChart(t testing.TB) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir(t))
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	return ch
}

// values merges values files (in order) and --set style overrides, as `helm install -f -f
// --set` would.
func values(t testing.TB, files []string, sets ...string) map[string]any {
	t.Helper()
	out := map[string]any{}
	for _, f := range files {
		v, err := chartutil.ReadValuesFile(f)
		if err != nil {
			t.Fatalf("read %s: %v", f, err)
		}
		out = chartutil.CoalesceTables(v.AsMap(), out)
	}
	for _, s := range sets {
		if err := strvals.ParseInto(s, out); err != nil {
			t.Fatalf("--set %s: %v", s, err)
		}
	}
	return out
}

// render runs `helm install --dry-run` client-side: schema validation, the chart's own checks
// and template rendering, exactly as helm does them. It returns the manifest's objects.
func render(t testing.TB, release, namespace string, vals map[string]any) ([]*unstructured.Unstructured, error) {
	t.Helper()
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.ClientOnly = true
	install.DryRun = true
	install.KubeVersion = &chartutil.KubeVersion{Version: "v1.35.3", Major: "1", Minor: "35"}
	install.ReleaseName = release
	install.Namespace = namespace
	install.DisableHooks = true
	rel, err := install.Run(loadChart(t), vals)
	if err != nil {
		return nil, err
	}
	return decodeManifest(rel.Manifest)
}

func mustRender(t testing.TB, release, namespace string, vals map[string]any) []*unstructured.Unstructured {
	t.Helper()
	objs, err := render(t, release, namespace, vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return objs
}

func decodeManifest(manifest string) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewBufferString(manifest), 4096)
	var objs []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return objs, nil
			}
			return nil, fmt.Errorf("decode manifest: %w", err)
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
}

// find returns the object of that kind and name, failing the test when it is absent.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	if o := lookup(objs, kind, name); o != nil {
		return o
	}
	t.Fatalf("no %s %q rendered; have %s", kind, name, kinds(objs))
	return nil
}

func lookup(objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	return nil
}

func ofKind(objs []*unstructured.Unstructured, kind string) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, o := range objs {
		if o.GetKind() == kind {
			out = append(out, o)
		}
	}
	return out
}

func kinds(objs []*unstructured.Unstructured) string {
	var s []string
	for _, o := range objs {
		s = append(s, o.GetKind()+"/"+o.GetName())
	}
	return strings.Join(s, ", ")
}

// field reads a nested field; a missing one fails the test.
func field(t testing.TB, o *unstructured.Unstructured, path ...string) any {
	t.Helper()
	v, ok, err := unstructured.NestedFieldNoCopy(o.Object, path...)
	if err != nil || !ok {
		t.Fatalf("%s/%s: no field %s (%v)", o.GetKind(), o.GetName(), strings.Join(path, "."), err)
	}
	return v
}

// container returns the named container (or init container) of a workload's pod template.
func container(t testing.TB, o *unstructured.Unstructured, list, name string) map[string]any {
	t.Helper()
	cs, _ := field(t, o, "spec", "template", "spec", list).([]any)
	for _, c := range cs {
		m := c.(map[string]any)
		if m["name"] == name {
			return m
		}
	}
	t.Fatalf("%s/%s: no %s %q", o.GetKind(), o.GetName(), list, name)
	return nil
}

func stringList(v any) []string {
	var out []string
	for _, x := range v.([]any) {
		out = append(out, fmt.Sprint(x))
	}
	return out
}

// flagValues parses an args list (--k v, --k=v, --bool) into flag -> values.
func flagValues(args []string) map[string][]string {
	out := map[string][]string{}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "--") {
			continue
		}
		k := strings.TrimPrefix(a, "--")
		if eq := strings.IndexByte(k, '='); eq >= 0 {
			out[k[:eq]] = append(out[k[:eq]], k[eq+1:])
			continue
		}
		if i+1 < len(args) && !strings.HasPrefix(args[i+1], "--") {
			out[k] = append(out[k], args[i+1])
			i++
			continue
		}
		out[k] = append(out[k], "")
	}
	return out
}

func toString(v any) string { return fmt.Sprint(v) }

func toInt(v any) int {
	switch n := v.(type) {
	case int:
		return n
	case int64:
		return int(n)
	case float64:
		return int(n)
	}
	return 0
}
