// Package podmodel is the one place that turns an endpoint's labels (and the pod annotations
// the EPP mirrors into them) into what P/D scheduling needs to know about a pod: its role,
// roleset, engine, serving port, KV connector, SGLang bootstrap port, multi-node routability and
// its model.aibrix.ai/config profile. Both llm-d (llm-d.ai/role) and AIBrix (role-name,
// roleset-name, model.aibrix.ai/*) fleets resolve here, so every plugin agrees on a pod.
package podmodel

import (
	"strconv"
	"strings"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Label and annotation keys read from pods.
const (
	LabelLLMDRole        = "llm-d.ai/role"
	LabelRoleName        = "role-name"
	LabelRolesetName     = "roleset-name"
	LabelPodGroupIndex   = "stormservice.orchestration.aibrix.ai/pod-group-index"
	LabelRoleReplicaIdx  = "stormservice.orchestration.aibrix.ai/role-replica-index"
	LabelEngine          = "model.aibrix.ai/engine"
	LabelPort            = "model.aibrix.ai/port"
	LabelKVConnectorType = "model.aibrix.ai/kv-connector-type"
	AnnotationBootstrap  = "model.aibrix.ai/sglang-bootstrap-port"
	AnnotationConfig     = "model.aibrix.ai/config"
	// LabelGIEEngineType is GIE's engine label (metrics mapping); an engine when none above is set.
	LabelGIEEngineType = "inference.networking.k8s.io/engine-type"
	// LabelModelName is AIBrix's model label; informational here (GIE pools select pods).
	LabelModelName = "model.aibrix.ai/name"
)

// DefaultBootstrapPort is SGLang's bootstrap port when the annotation is absent or invalid.
const DefaultBootstrapPort = 8998

// Role is a pod's resolved scheduling role.
type Role string

// Roles. RoleOther is an AIBrix role-name other than prefill/decode (e.g. "all"): a combined
// candidate when its profile says combined:true. RoleNone is a pod with no role label at all.
const (
	RoleNone                Role = ""
	RolePrefill             Role = "prefill"
	RoleDecode              Role = "decode"
	RoleEncode              Role = "encode"
	RoleEncodePrefill       Role = "encode-prefill"
	RolePrefillDecode       Role = "prefill-decode"
	RoleEncodePrefillDecode Role = "encode-prefill-decode"
	RoleOther               Role = "other"
	// RoleBoth is llm-d's deprecated alias of prefill-decode (a label value, resolved to
	// RolePrefillDecode).
	RoleBoth Role = "both"
)

// RoleSource says which label a role came from.
type RoleSource string

// Role sources.
const (
	SourceNone   RoleSource = ""
	SourceLLMD   RoleSource = "llm-d"
	SourceAIBrix RoleSource = "aibrix"
)

// Pod is the resolved view of one endpoint.
type Pod struct {
	Endpoint fwksched.Endpoint // nil when built from metadata alone

	Name      string // pod name (not the "-rank-N" endpoint name)
	Namespace string
	Key       string // "namespace/name", the ledger and metrics key
	Address   string
	Port      string // engine HTTP port: model.aibrix.ai/port, else the endpoint's port

	Role       Role
	RoleSource RoleSource
	RawRole    string // the label value as written

	Roleset      string
	ReplicaIndex string

	Engine         Engine
	EngineDeclared bool   // a label or annotation named the engine
	KVConnector    string // lower-cased model.aibrix.ai/kv-connector-type, "" when absent or unknown
	BootstrapPort  int
	// BootstrapPortDeclared is true when a valid sglang-bootstrap-port annotation set
	// BootstrapPort: only then does the EPP tell the sidecar, whose own flag is the default.
	BootstrapPortDeclared bool
	// PortDeclared is true when a valid model.aibrix.ai/port label set Port.
	PortDeclared bool

	// Routable is false for multi-node followers: pods whose pod-group-index is set and not "0".
	Routable bool

	// Config is the parsed model.aibrix.ai/config annotation, nil when absent or invalid.
	Config *ModelConfig
	// ConfigErr explains why a present annotation was ignored.
	ConfigErr error
	// Invalid lists the other annotations/labels that were ignored as invalid (already logged).
	Invalid []string
}

// KnownKVConnectors are the connectors AIBrix knows (shfs, nixl, mooncake) plus the two llm-d
// protocols pdgate's sidecar speaks (nixlv2, shared-storage), so a pod can select either by
// label; others resolve to the default.
var KnownKVConnectors = map[string]bool{"shfs": true, "nixl": true, "mooncake": true, "nixlv2": true, "shared-storage": true}

// FromEndpoint resolves a scheduling endpoint.
func FromEndpoint(ep fwksched.Endpoint) Pod {
	if ep == nil {
		return Pod{}
	}
	p := FromMetadata(ep.GetMetadata())
	p.Endpoint = ep
	return p
}

// FromMetadata resolves endpoint metadata. It never fails: invalid values are recorded in
// Invalid/ConfigErr (and logged once per pod by Report) and treated as absent.
func FromMetadata(meta *fwkdl.EndpointMetadata) Pod {
	if meta == nil {
		return Pod{}
	}
	labels := meta.Labels
	p := Pod{
		Name:      meta.PodName,
		Namespace: meta.NamespacedName.Namespace,
		Address:   meta.Address,
		Port:      meta.Port,
		Routable:  true,
	}
	if p.Name == "" {
		p.Name = meta.NamespacedName.Name
	}
	p.Key = p.Namespace + "/" + p.Name

	p.RawRole, p.Role, p.RoleSource = resolveRole(labels)
	p.Roleset = labels[LabelRolesetName]
	p.ReplicaIndex = labels[LabelRoleReplicaIdx]
	if v, ok := labels[LabelPodGroupIndex]; ok && strings.TrimSpace(v) != "0" {
		p.Routable = false
	}

	engine := labels[LabelEngine]
	if engine == "" {
		engine = labels[annotationEngine]
	}
	if engine != "" {
		if e, ok := ParseEngine(engine); ok {
			p.Engine, p.EngineDeclared = e, true
		} else {
			p.Invalid = append(p.Invalid, LabelEngine+"="+engine)
		}
	} else if e, ok := ParseEngine(labels[LabelGIEEngineType]); ok {
		// GIE's label names the metrics mapping; when it names an engine pdgate speaks, it is
		// that pod's engine too (other values are left to GIE and are not an error here).
		p.Engine, p.EngineDeclared = e, true
	}
	if p.Engine == "" {
		p.Engine = EngineVLLM
	}

	if port := labels[LabelPort]; port != "" {
		if n, err := strconv.Atoi(port); err == nil && n > 0 && n <= 65535 {
			p.Port, p.PortDeclared = strconv.Itoa(n), true
		} else {
			p.Invalid = append(p.Invalid, LabelPort+"="+port)
		}
	}

	if kv := strings.ToLower(strings.TrimSpace(labels[LabelKVConnectorType])); kv != "" {
		if KnownKVConnectors[kv] {
			p.KVConnector = kv
		} else {
			p.Invalid = append(p.Invalid, LabelKVConnectorType+"="+kv)
		}
	}

	p.BootstrapPort = DefaultBootstrapPort
	bp := labels[annotationBootstrap]
	if bp == "" {
		bp = labels[AnnotationBootstrap] // set as a label rather than an annotation
	}
	if bp != "" {
		// AIBrix parses base-10 within 32 bits; a port must also fit 1..65535 to be usable.
		if n, err := strconv.ParseInt(strings.TrimSpace(bp), 10, 32); err == nil && n > 0 && n <= 65535 {
			p.BootstrapPort, p.BootstrapPortDeclared = int(n), true
		} else {
			p.Invalid = append(p.Invalid, AnnotationBootstrap+"="+bp)
		}
	}

	if raw, ok := labels[annotationConfig]; ok {
		p.Config, p.ConfigErr = ParseConfig(raw)
	}
	return p
}

// The label keys under which the EPP mirrors these annotations, spelled out as constants so
// that looking them up costs no string concatenation per pod and request.
const (
	annotationEngine    = protocol.AnnotationLabelPrefix + LabelEngine
	annotationBootstrap = protocol.AnnotationLabelPrefix + AnnotationBootstrap
	annotationConfig    = protocol.AnnotationLabelPrefix + AnnotationConfig
)

// LLMDRole returns the llm-d.ai/role label's value as written and whether the label is set.
// llm-d's role filters compare the raw value (an unknown value is declared and matches no
// role), unlike Pod.Role, which falls back to AIBrix's role-name; this keeps the label name
// in the pod model while the filters keep llm-d's rule.
func LLMDRole(labels map[string]string) (string, bool) {
	v, ok := labels[LabelLLMDRole]
	return v, ok
}

// resolveRole prefers llm-d.ai/role and falls back to AIBrix's role-name.
func resolveRole(labels map[string]string) (string, Role, RoleSource) {
	if v, ok := labels[LabelLLMDRole]; ok {
		switch Role(v) {
		case RolePrefill, RoleDecode, RoleEncode, RoleEncodePrefill, RolePrefillDecode, RoleEncodePrefillDecode:
			return v, Role(v), SourceLLMD
		case RoleBoth:
			return v, RolePrefillDecode, SourceLLMD
		}
		// An unknown llm-d value is treated like no llm-d role so AIBrix labels still apply.
	}
	if v, ok := labels[LabelRoleName]; ok && v != "" {
		switch v {
		case "prefill":
			return v, RolePrefill, SourceAIBrix
		case "decode":
			return v, RoleDecode, SourceAIBrix
		default:
			return v, RoleOther, SourceAIBrix
		}
	}
	return "", RoleNone, SourceNone
}

// ServesPrefill reports whether the pod's role runs a prefill leg for others (P/D prefill side).
func (p *Pod) ServesPrefill() bool {
	switch p.Role {
	case RolePrefill, RoleEncodePrefill:
		return true
	}
	return false
}

// ServesDecode reports whether the pod is a pure decode target of a P/D pair.
func (p *Pod) ServesDecode() bool { return p.Role == RoleDecode }

// InRoleset reports whether the pod takes part in AIBrix roleset pairing: it is routable and
// carries roleset-name and a prefill or decode role.
func (p *Pod) InRoleset() bool {
	return p.Routable && p.Roleset != "" && (p.ServesPrefill() || p.ServesDecode())
}

// IsCombined reports whether the pod is a combined (standard) pod for a request resolving
// config-profile header value profileHeader: llm-d roles that serve both phases always are; a
// pod whose role-name is not prefill/decode (or that has no role label) is when its own
// resolved profile says routingConfig.combined=true. AIBrix's code also requires role-name and
// roleset-name, but its user guide's standard-pod example carries neither; pdgate follows the
// guide so such fleets work without relabelling. Multi-node followers never are.
func (p *Pod) IsCombined(profileHeader string, hints AutoHints) bool {
	if !p.Routable {
		return false
	}
	switch p.Role {
	case RolePrefillDecode, RoleEncodePrefillDecode:
		return true
	case RoleOther, RoleNone:
		name, ok := p.Config.ResolveName(profileHeader, hints)
		return ok && p.Config.Profiles[name].RoutingConfig.Combined
	}
	return false
}

// ServesWholeRequest reports whether the pod can take a request without a prefill leg when
// pdgate falls back from P/D: combined pods, and (llm-d semantics) role-less pods without a
// model.aibrix.ai/config annotation.
func (p *Pod) ServesWholeRequest(profileHeader string, hints AutoHints) bool {
	if p.IsCombined(profileHeader, hints) {
		return true
	}
	return p.Routable && p.Role == RoleNone && p.Config == nil && p.Roleset == ""
}

// Bucket returns the pod's prompt-length bounds for a request: min and max inclusive, max 0 =
// unlimited. scoped is false when the pod has no resolved profile (any length suits it).
func (p *Pod) Bucket(profileHeader string, hints AutoHints) (lo, hi int, scoped bool) {
	name, ok := p.Config.ResolveName(profileHeader, hints)
	if !ok {
		return 0, 0, false
	}
	return p.Config.Profiles[name].RoutingConfig.BucketBounds()
}

// Suits reports whether a prompt of length n fits the pod's bucket.
func (p *Pod) Suits(n int, profileHeader string, hints AutoHints) bool {
	lo, hi, scoped := p.Bucket(profileHeader, hints)
	if !scoped {
		return true
	}
	return BucketSuits(lo, hi, n)
}

// BucketSuits applies AIBrix's rule: min > max (with max set) never suits; otherwise
// lo <= n <= hi, both inclusive, hi <= 0 meaning unlimited.
func BucketSuits(lo, hi, n int) bool {
	if lo < 0 {
		lo = 0
	}
	if hi > 0 && lo > hi {
		return false
	}
	if n < lo {
		return false
	}
	return hi <= 0 || n <= hi
}

// KVConnectorOr returns the pod's KV connector or def when the pod declares none.
func (p *Pod) KVConnectorOr(def string) string {
	if p.KVConnector != "" {
		return p.KVConnector
	}
	return def
}

type fwkEndpoint = fwksched.Endpoint

type fwkRequest = fwksched.LLMRequest
