package chart

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// shippedConfigs maps chart config names (charts/pdgate/configs/<name>) to the samples in
// config/ they copy. Helm reads files inside the chart only, so the chart carries copies; the
// test keeps them identical to the samples their owners maintain and test.
func shippedConfigs(t *testing.T) map[string]string {
	root := repoRoot(t)
	out := map[string]string{}
	for _, src := range []struct{ glob, prefix string }{
		{"config/llmd/*.yaml", "llmd-"},
		{"config/aibrix/*.yaml", "aibrix-"},
		{"config/aibrix-pd.yaml", ""},
		{"config/recommended.yaml", ""},
	} {
		files, _ := filepath.Glob(filepath.Join(root, src.glob))
		for _, f := range files {
			rel, _ := filepath.Rel(root, f)
			out[src.prefix+filepath.Base(f)] = rel
		}
	}
	return out
}

// TestShippedConfigsMatchSamples: every llm-d and AIBrix sample config is shipped in the chart,
// byte for byte, and the chart ships nothing else.
func TestShippedConfigsMatchSamples(t *testing.T) {
	root := repoRoot(t)
	chartConfigs := filepath.Join(chartDir(t), "configs")
	want := shippedConfigs(t)
	for name, src := range want {
		a, _ := os.ReadFile(filepath.Join(root, src))
		b, err := os.ReadFile(filepath.Join(chartConfigs, name))
		if err != nil || !bytes.Equal(a, b) {
			t.Errorf("%s is not shipped unchanged in the chart; run: cp %s charts/pdgate/configs/%s", src, src, name)
		}
	}
	copies, _ := filepath.Glob(filepath.Join(chartConfigs, "*.yaml"))
	for _, c := range copies {
		if _, ok := want[filepath.Base(c)]; !ok {
			t.Errorf("chart config %s copies no sample in config/; remove it or restore the sample", filepath.Base(c))
		}
	}
}
