// Package lab runs the whole disaggregated data path on one machine: simulators on distinct
// loopback addresses, a routing sidecar in front of every decode-capable pod, the EPP in
// standalone mode and the dev gateway, all as real processes from bin/.
package lab

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"sigs.k8s.io/yaml"
)

// Roles a lab pod can play (the simulator's --role values).
const (
	RolePrefill  = "prefill"
	RoleDecode   = "decode"
	RoleCombined = "combined"
	RoleEncode   = "encode"
)

// Engines (the simulator's --dialect values).
const (
	EngineVLLM   = "vllm"
	EngineSGLang = "sglang"
	EngineTRTLLM = "trtllm"
)

// Topology is a lab description (config/lab/*.yaml).
type Topology struct {
	// Name identifies the topology in output.
	Name string `json:"name"`
	// Description is shown when the lab starts.
	Description string `json:"description,omitempty"`
	// Model is the served model name (every pod serves the same one).
	Model string `json:"model,omitempty"`
	// EPPConfig is the EndpointPickerConfig file, relative to the topology file.
	EPPConfig string `json:"eppConfig"`
	// SimProfile is the default cost profile (relative to the topology file); empty uses the
	// simulator's built-in one.
	SimProfile string `json:"simProfile,omitempty"`
	// TimeScale runs every simulator this many model seconds per wall second.
	TimeScale float64 `json:"timeScale,omitempty"`
	// SidecarArgs are extra flags for every sidecar ("--prefill-failure-policy=retry").
	SidecarArgs []string `json:"sidecarArgs,omitempty"`
	// EPPArgs are extra flags for the EPP.
	EPPArgs []string `json:"eppArgs,omitempty"`
	// Pods lists the pod groups.
	Pods []PodSpec `json:"pods"`
	// Objectives are InferenceObjectives created in Kubernetes mode (objectives.go).
	Objectives []Objective `json:"objectives,omitempty"`

	dir string // directory of the topology file, for relative paths
}

// PodSpec is one group of identical pods.
type PodSpec struct {
	// Name is the group name; pods are named <name>-<index>.
	Name string `json:"name"`
	// Role is prefill, decode, combined or encode.
	Role string `json:"role"`
	// Roleset pairs prefill and decode pods (AIBrix roleset-name); empty for combined/encode.
	Roleset string `json:"roleset,omitempty"`
	// Engine is vllm, sglang or trtllm.
	Engine string `json:"engine,omitempty"`
	// Count is the number of pods in the group (default 1).
	Count int `json:"count,omitempty"`
	// Profile overrides the topology's simulator profile.
	Profile string `json:"profile,omitempty"`
	// KVConnector is the simulator's connector (vllm: nixl, shared-storage; sglang: bootstrap;
	// trtllm: ucx); empty takes the engine's default.
	KVConnector string `json:"kvConnector,omitempty"`
	// TRTScheduleStyle is context_first or generation_first (trtllm decode-capable pods).
	TRTScheduleStyle string `json:"trtScheduleStyle,omitempty"`
	// Buckets sets the prompt-length bucket bounds in the model.aibrix.ai/config annotation.
	Buckets *Buckets `json:"buckets,omitempty"`
	// Labels and Annotations are applied to each pod's endpoint on top of the generated ones.
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// SimArgs are extra simulator flags for this group ("--max-batch=8").
	SimArgs []string `json:"simArgs,omitempty"`
	// DataParallelSize N > 1 makes each pod one simulator process serving N data-parallel
	// ranks on consecutive ports (vLLM only; dataparallel.go has the layout).
	DataParallelSize int `json:"dataParallelSize,omitempty"`
	// RankEndpoints lists a decode-capable DP pod to the EPP as one endpoint per rank
	// (llm-d's InferencePool with one targetPort per rank, for data-parallel-profile-handler)
	// instead of one endpoint at its sidecar. Prefill DP pods always have one per rank.
	RankEndpoints bool `json:"rankEndpoints,omitempty"`
}

// Buckets are AIBrix prompt-length bucket bounds (both inclusive, max <= 0 unlimited).
type Buckets struct {
	Min int `json:"min"`
	Max int `json:"max"`
}

// LoadTopology reads, defaults and validates a topology file.
func LoadTopology(path string) (*Topology, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	t, err := ParseTopology(b, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("topology %s: %w", path, err)
	}
	return t, nil
}

// ParseTopology parses a topology; dir resolves its relative paths.
func ParseTopology(b []byte, dir string) (*Topology, error) {
	var t Topology
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return nil, fmt.Errorf("parse: %w", err)
	}
	t.dir = dir
	t.applyDefaults()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Topology) applyDefaults() {
	if t.Model == "" {
		t.Model = "meta-llama/Llama-3.1-8B-Instruct"
	}
	if t.TimeScale == 0 {
		t.TimeScale = 1
	}
	for i := range t.Pods {
		p := &t.Pods[i]
		if p.Count == 0 {
			p.Count = 1
		}
		if p.Engine == "" {
			p.Engine = EngineVLLM
		}
		if p.KVConnector == "" {
			p.KVConnector = map[string]string{EngineVLLM: "nixl", EngineSGLang: "bootstrap", EngineTRTLLM: "ucx"}[p.Engine]
		}
		if p.Engine == EngineTRTLLM && p.TRTScheduleStyle == "" {
			p.TRTScheduleStyle = "context_first"
		}
	}
}

var connectors = map[string][]string{
	EngineVLLM: {"nixl", "shared-storage"}, EngineSGLang: {"bootstrap"}, EngineTRTLLM: {"ucx"},
}

// Validate reports every problem, each naming the field.
func (t *Topology) Validate() error {
	var errs []error
	add := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if t.Name == "" {
		add("name: required")
	}
	if t.EPPConfig == "" {
		add("eppConfig: required (an EndpointPickerConfig file, relative to the topology)")
	} else if _, err := os.Stat(t.Path(t.EPPConfig)); err != nil {
		add("eppConfig: %v", err)
	}
	if t.SimProfile != "" {
		if _, err := os.Stat(t.Path(t.SimProfile)); err != nil {
			add("simProfile: %v", err)
		}
	}
	if t.TimeScale < 0 {
		add("timeScale: must be > 0, got %g", t.TimeScale)
	}
	if len(t.Pods) == 0 {
		add("pods: at least one pod group is required")
	}
	names := map[string]bool{}
	engines := map[string]bool{}
	roles := map[string]int{}
	rolesets := map[string]map[string]int{}
	total := 0
	for i, p := range t.Pods {
		f := fmt.Sprintf("pods[%d]", i)
		if p.Name == "" || strings.ContainsAny(p.Name, " /:,;") {
			add("%s.name: required, without spaces or / : , ;", f)
		} else if names[p.Name] {
			add("%s.name: %q used twice", f, p.Name)
		}
		names[p.Name] = true
		switch p.Role {
		case RolePrefill, RoleDecode:
			if p.Roleset == "" {
				add("%s.roleset: required for role %s", f, p.Role)
			}
		case RoleCombined, RoleEncode:
		default:
			add("%s.role: must be prefill, decode, combined or encode, got %q", f, p.Role)
		}
		roles[p.Role] += p.Count
		if p.Roleset != "" {
			if rolesets[p.Roleset] == nil {
				rolesets[p.Roleset] = map[string]int{}
			}
			rolesets[p.Roleset][p.Role] += p.Count
		}
		cs, ok := connectors[p.Engine]
		if !ok {
			add("%s.engine: must be vllm, sglang or trtllm, got %q", f, p.Engine)
		} else if !slices.Contains(cs, p.KVConnector) {
			add("%s.kvConnector: %s supports %s, got %q", f, p.Engine, strings.Join(cs, ", "), p.KVConnector)
		}
		engines[p.Engine] = true
		if p.Count < 0 || p.Count > 32 {
			add("%s.count: must be in 1..32, got %d", f, p.Count)
		}
		total += p.Count
		if p.TRTScheduleStyle != "" && p.TRTScheduleStyle != "context_first" && p.TRTScheduleStyle != "generation_first" {
			add("%s.trtScheduleStyle: must be context_first or generation_first, got %q", f, p.TRTScheduleStyle)
		}
		if p.Buckets != nil && p.Buckets.Max > 0 && p.Buckets.Min > p.Buckets.Max {
			add("%s.buckets: min %d > max %d", f, p.Buckets.Min, p.Buckets.Max)
		}
		if err := validDataParallel(p); err != nil {
			add("%s.%v", f, err)
		}
		if p.Profile != "" {
			if _, err := os.Stat(t.Path(p.Profile)); err != nil {
				add("%s.profile: %v", f, err)
			}
		}
	}
	errs = append(errs, validObjectives(t.Objectives)...)
	if len(engines) > 1 {
		add("pods: every pod of one model must use the same engine, got %s", strings.Join(sortedKeys(engines), ", "))
	}
	if total > 200 {
		add("pods: at most 200 pods, got %d", total)
	}
	if roles[RoleDecode]+roles[RoleCombined] == 0 {
		add("pods: at least one decode or combined pod is required")
	}
	for _, rs := range sortedKeys(rolesets) {
		if rolesets[rs][RolePrefill] == 0 || rolesets[rs][RoleDecode] == 0 {
			add("pods: roleset %q needs at least one prefill and one decode pod", rs)
		}
	}
	return errors.Join(errs...)
}

// Path resolves a path from the topology file's directory.
func (t *Topology) Path(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(t.dir, p)
}

// DecodeCapable reports whether pods of the role get a sidecar.
func DecodeCapable(role string) bool { return role == RoleDecode || role == RoleCombined }

// bucketAnnotation renders the model.aibrix.ai/config annotation for a pod group, or "".
func bucketAnnotation(p PodSpec) string {
	if p.Buckets == nil && p.Role != RoleCombined {
		return ""
	}
	rc := map[string]any{}
	if p.Buckets != nil {
		rc["promptLenBucketMinLength"] = p.Buckets.Min
		rc["promptLenBucketMaxLength"] = p.Buckets.Max
	}
	if p.Role == RoleCombined {
		rc["combined"] = true
	}
	b, _ := json.Marshal(map[string]any{
		"defaultProfile": "default",
		"profiles":       map[string]any{"default": map[string]any{"routingStrategy": "pd", "routingConfig": rc}},
	})
	return string(b)
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
