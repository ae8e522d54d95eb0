package lab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeTopology(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "epp.yaml"), []byte("kind: EndpointPickerConfig\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "topo.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// planFor loads body as a topology and plans it with opts, in a fresh directory.
func planFor(t *testing.T, body string, opts PlanOptions) *Plan {
	t.Helper()
	topo, err := LoadTopology(writeTopology(t, body))
	if err != nil {
		t.Fatal(err)
	}
	opts.Dir = t.TempDir()
	plan, err := NewPlan(topo, opts)
	if err != nil {
		t.Fatal(err)
	}
	return plan
}

func TestLoadTopologyValidation(t *testing.T) {
	const ok = "name: t\neppConfig: epp.yaml\npods:\n"
	tests := []struct {
		name    string
		body    string
		wantErr []string
	}{
		{name: "minimal combined", body: ok + "- {name: c, role: combined}\n"},
		{name: "pd roleset", body: ok + "- {name: p, role: prefill, roleset: a}\n- {name: d, role: decode, roleset: a}\n"},
		{name: "unknown field", body: ok + "- {name: c, role: combined, colour: red}\n", wantErr: []string{"colour"}},
		{name: "no name no config", body: "pods:\n- {name: c, role: combined}\n", wantErr: []string{"name: required", "eppConfig: required"}},
		{name: "missing epp file", body: "name: t\neppConfig: nope.yaml\npods:\n- {name: c, role: combined}\n", wantErr: []string{"eppConfig:"}},
		{name: "bad role", body: ok + "- {name: c, role: chef}\n", wantErr: []string{"pods[0].role", "at least one decode or combined"}},
		{name: "prefill without roleset", body: ok + "- {name: p, role: prefill}\n- {name: c, role: combined}\n", wantErr: []string{"pods[0].roleset"}},
		{name: "incomplete roleset", body: ok + "- {name: p, role: prefill, roleset: a}\n- {name: c, role: combined}\n", wantErr: []string{`roleset "a" needs`}},
		{name: "bad connector", body: ok + "- {name: c, role: combined, engine: sglang, kvConnector: nixl}\n", wantErr: []string{"pods[0].kvConnector"}},
		{name: "mixed engines", body: ok + "- {name: c, role: combined, engine: sglang}\n- {name: d, role: combined}\n", wantErr: []string{"same engine"}},
		{name: "duplicate names", body: ok + "- {name: c, role: combined}\n- {name: c, role: combined}\n", wantErr: []string{"used twice"}},
		{name: "bad buckets", body: ok + "- {name: c, role: combined, buckets: {min: 10, max: 5}}\n", wantErr: []string{"pods[0].buckets"}},
		{name: "bad schedule style", body: ok + "- {name: c, role: combined, engine: trtllm, trtScheduleStyle: sideways}\n", wantErr: []string{"trtScheduleStyle"}},
		{name: "count too large", body: ok + "- {name: c, role: combined, count: 99}\n", wantErr: []string{"pods[0].count"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			topo, err := LoadTopology(writeTopology(t, tt.body))
			if len(tt.wantErr) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				if topo.Pods[0].Count != 1 || topo.Pods[0].Engine != EngineVLLM || topo.Model == "" {
					t.Errorf("defaults not applied: %+v", topo.Pods[0])
				}
				return
			}
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range tt.wantErr {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

// Every shipped topology must load: the e2e suite and `make run` depend on them.
func TestShippedTopologies(t *testing.T) {
	files, _ := filepath.Glob("../../../config/lab/*.yaml")
	if len(files) < 5 {
		t.Fatalf("want at least 5 shipped topologies, found %v", files)
	}
	for _, f := range files {
		topo, err := LoadTopology(f)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		plan, err := NewPlan(topo, PlanOptions{Subnet: "127.0.77", Dir: t.TempDir(), BinDir: "bin"})
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if _, err := plan.EndpointsYAML(); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
