package epp

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Config is one EPP configuration under test and the pool it routes.
type Config struct {
	Name string          `json:"name"`
	Kind eppharness.Kind `json:"kind"`
	// File is the EndpointPickerConfig relative to the repository root ("" = the binary's
	// default config).
	File string `json:"file,omitempty"`
	// Layout names the pod layout (see layouts).
	Layout string `json:"layout"`
	// Recommended marks pdgate's recommended config (the burst goal applies to it).
	Recommended bool `json:"recommended,omitempty"`
	// Traced runs the config with tracing on, every request sampled, exporting to a real OTLP
	// receiver in the bench (name: the config's + TracedSuffix).
	Traced bool `json:"traced,omitempty"`
}

// TracedSuffix selects a pdgate config with tracing on: `--configs recommended,recommended+tracing`
// measures both in one run and reports the traced one's net CPU as a multiple of the other's.
const TracedSuffix = "+tracing"

// lookupConfig finds a config by name, with TracedSuffix allowed on pdgate's.
func lookupConfig(name string) (Config, error) {
	base, traced := strings.CutSuffix(name, TracedSuffix)
	for _, c := range DefaultConfigs {
		if c.Name != base {
			continue
		}
		if traced {
			if c.Kind != eppharness.KindPdgate {
				return Config{}, fmt.Errorf("bench epp: config %q: only pdgate's configs trace", name)
			}
			c.Name, c.Traced, c.Recommended = name, true, false
		}
		return c, nil
	}
	return Config{}, fmt.Errorf("bench epp: unknown config %q (known: %s, and %s after a pdgate config)", name, configNames(), TracedSuffix)
}

// DefaultConfigs are measured in this order; the first is the baseline.
var DefaultConfigs = []Config{
	{Name: "gie-default", Kind: eppharness.KindStockGIE, Layout: "plain"},
	{Name: FloorConfig, Kind: eppharness.KindFloor, Layout: "plain"},
	{Name: "llmd-pd", Kind: eppharness.KindPdgate, File: "config/llmd/pd.yaml", Layout: "llmd-pd"},
	{Name: "aibrix-pd", Kind: eppharness.KindPdgate, File: "config/aibrix-pd.yaml", Layout: "aibrix"},
	{Name: "llmd-epd", Kind: eppharness.KindPdgate, File: "config/llmd/e-p-d.yaml", Layout: "llmd-epd"},
	{Name: "recommended", Kind: eppharness.KindPdgate, File: "config/recommended.yaml", Layout: "aibrix", Recommended: true},
}

// FloorConfig names the protocol floor (eppharness.KindFloor): the EPP's exchange answered with
// no decision. Every config's net CPU per request is also reported as a multiple of it.
const FloorConfig = "floor"

// Primary is the number of equal pods the primary (decode) profile may pick in the throughput
// and burst runs: the burst is counted over them.
const Primary = 8

// PoolPrimary is the primary pods of a layout's pool of pods pods (--pods): all of a plain
// pool, half of a P/D pool (the other half prefill, encode or AIBrix prefill pods, as Layout
// places them). pods 0 is the default setup, Primary primary pods whatever the layout.
func PoolPrimary(layout string, pods int) int {
	switch {
	case pods == 0:
		return Primary
	case layout == "plain":
		return pods
	}
	return pods / 2
}

// Layout places the pods of one config on hosts (one address per pod, all on port) with
// primary pods the primary (decode, or whole-request) profile may pick: "plain" has only
// those; the P/D layouts add as many pods of the other roles (llm-d P/D: as many prefill
// pods; E/P/D: half prefill, half encode; AIBrix: rolesets of 2 prefill + 2 decode pods). It
// returns the endpoints and the primary pods' host:port.
func Layout(name string, primaryPods int, hosts []string, port int) (eps []eppharness.Endpoint, primary []string, err error) {
	if primaryPods < 2 || primaryPods%2 != 0 {
		return nil, nil, fmt.Errorf("layout %s: %d primary pods, want an even number >= 2", name, primaryPods)
	}
	need := 2 * primaryPods
	if name == "plain" {
		need = primaryPods
	}
	if len(hosts) < need {
		return nil, nil, fmt.Errorf("layout %s: %d addresses, want %d", name, len(hosts), need)
	}
	add := func(pod string, labels map[string]string, isPrimary bool) {
		h := hosts[len(eps)]
		eps = append(eps, eppharness.Endpoint{Name: pod, Address: h, Port: port, Labels: labels})
		if isPrimary {
			primary = append(primary, fmt.Sprintf("%s:%d", h, port))
		}
	}
	llmd := func(role string) map[string]string { return map[string]string{podmodel.LabelLLMDRole: role} }
	switch name {
	case "plain": // GIE's default config: every pod serves whole requests
		for i := 0; i < primaryPods; i++ {
			add(fmt.Sprintf("pod-%d", i), nil, true)
		}
	case "llmd-pd":
		for i := 0; i < primaryPods; i++ {
			add(fmt.Sprintf("decode-%d", i), llmd("decode"), true)
			add(fmt.Sprintf("prefill-%d", i), llmd("prefill"), false)
		}
	case "llmd-epd":
		for i := 0; i < primaryPods; i++ {
			add(fmt.Sprintf("decode-%d", i), llmd("decode"), true)
		}
		for i := 0; i < primaryPods/2; i++ {
			add(fmt.Sprintf("prefill-%d", i), llmd("prefill"), false)
			add(fmt.Sprintf("encode-%d", i), llmd("encode"), false)
		}
	case "aibrix":
		for rs := 0; rs < primaryPods/2; rs++ {
			for k, role := range []string{"prefill", "prefill", "decode", "decode"} {
				labels := map[string]string{podmodel.LabelRoleName: role, podmodel.LabelRolesetName: fmt.Sprintf("rs%d", rs),
					podmodel.LabelEngine: "vllm", podmodel.LabelModelName: Model}
				add(fmt.Sprintf("rs%d-%s-%d", rs, role, k%2), labels, role == "decode")
			}
		}
	default:
		return nil, nil, fmt.Errorf("unknown pod layout %q", name)
	}
	return eps, primary, nil
}

// ParserType is pdgate's fast request parser.
const ParserType = "pdgate-openai-parser"

// WithFastParser returns the config with pdgate's request parser selected, unless it already
// names a parser. The shipped configs are measured as shipped plus the parser, which is what
// pdgate's EPP is meant to run with.
func WithFastParser(raw []byte, payload string) ([]byte, bool, error) {
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		return nil, false, fmt.Errorf("parsing the EndpointPickerConfig: %w", err)
	}
	if doc == nil {
		return nil, false, fmt.Errorf("empty EndpointPickerConfig")
	}
	if _, has := doc["parser"]; has {
		return raw, false, nil
	}
	plugins, _ := doc["plugins"].([]any)
	spec := map[string]any{"type": ParserType}
	if payload != "" {
		spec["parameters"] = map[string]any{"payload": payload}
	}
	doc["plugins"] = append(plugins, spec)
	doc["parser"] = map[string]any{"pluginRef": ParserType}
	out, err := yaml.Marshal(doc)
	if err != nil {
		return nil, false, err
	}
	return out, true, nil
}

// prepareConfig writes the config the EPP will load into dir and says how it was derived.
// parser is "none" (as the file says) or a pdgate-openai-parser payload mode ("map", "raw").
func prepareConfig(root, dir string, c Config, parser string) (path, note string, err error) {
	if c.Kind == eppharness.KindFloor {
		return "", "no config: every request to the first pod", nil
	}
	if c.File == "" {
		return "", "binary's default config", nil
	}
	raw, err := os.ReadFile(filepath.Join(root, c.File))
	if err != nil {
		return "", "", fmt.Errorf("config %s: %w", c.Name, err)
	}
	note = c.File
	if parser != "none" {
		var added bool
		if raw, added, err = WithFastParser(raw, parser); err != nil {
			return "", "", fmt.Errorf("config %s (%s): %w", c.Name, c.File, err)
		}
		if added {
			note += " + " + ParserType + " (payload: " + parser + ")"
		}
	}
	path = filepath.Join(dir, c.Name+".yaml")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return "", "", err
	}
	return path, note, nil
}
