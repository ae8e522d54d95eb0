package podmodel

import (
	"strconv"
	"strings"

	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
)

// Well-known topology labels (Kubernetes' node labels; llm-d's topology-extractor reads them
// from the pod). TopologyRackLabel is llm-d's rack label; Kubernetes defines none.
const (
	TopologyHostnameLabel = "kubernetes.io/hostname"
	TopologyRackLabel     = "topology.kubernetes.io/rack"
	TopologyZoneLabel     = "topology.kubernetes.io/zone"
	TopologyRegionLabel   = "topology.kubernetes.io/region"
)

// Override labels: when a pod carries one, it wins over the well-known (or configured) label
// of that level. They let standalone endpoints files, the lab and clusters whose pods do not
// carry node labels place a pod without relabelling it with Kubernetes' own keys.
const (
	OverrideHostnameLabel = "topology.pdgate.io/hostname"
	OverrideRackLabel     = "topology.pdgate.io/rack"
	OverrideZoneLabel     = "topology.pdgate.io/zone"
	OverrideRegionLabel   = "topology.pdgate.io/region"
)

// TopologyLabels names the label read for each level; an empty name means the well-known one.
type TopologyLabels struct {
	Hostname, Rack, Zone, Region string
}

// WithDefaults fills empty names with the well-known labels.
func (l TopologyLabels) WithDefaults() TopologyLabels {
	if l.Hostname == "" {
		l.Hostname = TopologyHostnameLabel
	}
	if l.Rack == "" {
		l.Rack = TopologyRackLabel
	}
	if l.Zone == "" {
		l.Zone = TopologyZoneLabel
	}
	if l.Region == "" {
		l.Region = TopologyRegionLabel
	}
	return l
}

// Topology is where a pod runs. An empty field is unknown.
type Topology struct {
	Hostname, Rack, Zone, Region string
}

// IsZero reports whether nothing is known.
func (t Topology) IsZero() bool { return t == Topology{} }

// TopologyOf reads a pod's topology from its labels: per level the override label, else the
// configured (or well-known) label.
func TopologyOf(labels map[string]string, names TopologyLabels) Topology {
	n := names.WithDefaults()
	pick := func(override, name string) string {
		if v := strings.TrimSpace(labels[override]); v != "" {
			return v
		}
		return strings.TrimSpace(labels[name])
	}
	return Topology{
		Hostname: pick(OverrideHostnameLabel, n.Hostname),
		Rack:     pick(OverrideRackLabel, n.Rack),
		Zone:     pick(OverrideZoneLabel, n.Zone),
		Region:   pick(OverrideRegionLabel, n.Region),
	}
}

// Level is the tightest topology level two pods share, tightest first.
type Level int

// Levels, ordered so that a smaller value is closer.
const (
	LevelHost Level = iota
	LevelRack
	LevelZone
	LevelRegion
	LevelNone
)

// String is the level's name as llm-d's minAffinity spells it.
func (l Level) String() string {
	switch l {
	case LevelHost:
		return "host"
	case LevelRack:
		return "rack"
	case LevelZone:
		return "zone"
	case LevelRegion:
		return "region"
	}
	return "none"
}

// ParseLevel parses host, rack, zone, region (and none).
func ParseLevel(s string) (Level, bool) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "host":
		return LevelHost, true
	case "rack":
		return LevelRack, true
	case "zone":
		return LevelZone, true
	case "region":
		return LevelRegion, true
	case "none":
		return LevelNone, true
	}
	return LevelNone, false
}

// CompareTopology is llm-d's rule: the first of hostname, rack, zone, region (in that order)
// whose values are both non-empty and equal; an empty value never matches, not even another
// empty one.
func CompareTopology(a, b Topology) Level {
	eq := func(x, y string) bool { return x != "" && x == y }
	switch {
	case eq(a.Hostname, b.Hostname):
		return LevelHost
	case eq(a.Rack, b.Rack):
		return LevelRack
	case eq(a.Zone, b.Zone):
		return LevelZone
	case eq(a.Region, b.Region):
		return LevelRegion
	}
	return LevelNone
}

// DPRankLabel declares an endpoint's data-parallel rank explicitly (standalone endpoints files
// list one entry per rank port); otherwise the rank comes from GIE's endpoint name
// "<pod>-rank-<i>" (one endpoint per InferencePool targetPorts entry).
const DPRankLabel = "pdgate.io/dp-rank"

// RankOf returns an endpoint's data-parallel rank and whether one is known: the DPRankLabel
// label, else the "-rank-<i>" suffix of the endpoint name when it differs from the pod name.
func RankOf(meta *fwkdl.EndpointMetadata) (int, bool) {
	if meta == nil {
		return 0, false
	}
	if v, ok := meta.Labels[DPRankLabel]; ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n >= 0 {
			return n, true
		}
		return 0, false
	}
	name := meta.NamespacedName.Name
	i := strings.LastIndex(name, "-rank-")
	if i < 0 || (meta.PodName != "" && name == meta.PodName) {
		return 0, false
	}
	n, err := strconv.Atoi(name[i+len("-rank-"):])
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// DefaultTopologyProducer is the instance name of llm-d's default topology producer.
const DefaultTopologyProducer = "topology-extractor"

// TopologyAttributeKey is the endpoint attribute key a topology producer writes, llm-d's
// "Topology/<producer>" (producer "" means DefaultTopologyProducer).
func TopologyAttributeKey(producer string) string {
	if producer == "" {
		producer = DefaultTopologyProducer
	}
	return "Topology/" + producer
}

// TopologyAttribute is the endpoint attribute of topology-extractor.
type TopologyAttribute struct{ Topology }

// Clone implements fwkdl.Cloneable.
func (t *TopologyAttribute) Clone() fwkdl.Cloneable {
	if t == nil {
		return nil
	}
	c := *t
	return &c
}

// AttributeGetter is what carries endpoint attributes (a scheduling endpoint, an AttributeMap).
type AttributeGetter interface {
	Get(key string) (fwkdl.Cloneable, bool)
}

// TopologyFromAttributes reads the topology a producer wrote on an endpoint.
func TopologyFromAttributes(attrs AttributeGetter, producer string) (Topology, bool) {
	if attrs == nil {
		return Topology{}, false
	}
	v, ok := attrs.Get(TopologyAttributeKey(producer))
	if !ok {
		return Topology{}, false
	}
	t, ok := v.(*TopologyAttribute)
	if !ok || t == nil {
		return Topology{}, false
	}
	return t.Topology, true
}

// RoleOfLabels resolves only a pod's role (the cheap part of FromMetadata), for code that
// partitions a whole pool on every request (stage-aware saturation).
func RoleOfLabels(labels map[string]string) Role {
	_, r, _ := resolveRole(labels)
	return r
}
