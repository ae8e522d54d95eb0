package simbench

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/podmodel"
)

// Placement lays the fleet out over zones, racks and hosts (one region) and makes a KV
// transfer's cost grow with the distance between the prefill and the decode pod, so
// topology-aware pairing is measured, not assumed.
//
// The transfer time of the cost profile (KVTransferTime) is the rack-local network transfer;
// Cost scales it by the tightest level the two pods share: on one host the KV moves over
// NVLink, across racks and zones it crosses more switches with less bisection bandwidth.
type Placement struct {
	Zones, RacksPerZone, PodsPerHost int
	// Cost multiplies the transfer time by shared level (indexed by podmodel.Level: host,
	// rack, zone, region, none).
	Cost [5]float64
}

// DefaultTransferCost is the model's multiplier per shared level: NVLink on a host is ~4x the
// rack network; a zone hop 2x a rack hop; across zones (same region) 4x.
var DefaultTransferCost = [5]float64{0.25, 1, 2, 4, 4}

// ParseTransferCost parses "HOST,RACK,ZONE,REGION": the multipliers of the rack-local
// transfer time when the two pods share a host, only a rack, only a zone (different racks),
// only the region (different zones); "" is DefaultTransferCost. Each must be > 0 and none may be
// below the one before it (a farther hop never costs less).
func ParseTransferCost(s string) ([5]float64, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultTransferCost, nil
	}
	parts := strings.Split(s, ",")
	if len(parts) != 4 {
		return [5]float64{}, fmt.Errorf("--transfer-cost %q: want four multipliers HOST,RACK,ZONE,REGION, e.g. 0.25,1,3,16", s)
	}
	var c [5]float64
	for i, part := range parts {
		v, err := strconv.ParseFloat(strings.TrimSpace(part), 64)
		if err != nil || v <= 0 {
			return [5]float64{}, fmt.Errorf("--transfer-cost %q: multiplier %d (%q) must be a number > 0", s, i+1, part)
		}
		if i > 0 && v < c[i-1] {
			return [5]float64{}, fmt.Errorf("--transfer-cost %q: multiplier %d (%g) is below the nearer level's %g", s, i+1, v, c[i-1])
		}
		c[i] = v
	}
	c[4] = c[3] // pods sharing nothing: as across zones (the fleet is one region)
	return c, nil
}

// ParsePlacement parses "ZxR" (zones × racks per zone, e.g. 2x4; 1x1 is a single rack), with
// four pods per host.
func ParsePlacement(s string) (*Placement, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	z, r, ok := strings.Cut(strings.ToLower(s), "x")
	zones, err1 := strconv.Atoi(z)
	racks, err2 := strconv.Atoi(r)
	if !ok || err1 != nil || err2 != nil || zones < 1 || racks < 1 {
		return nil, fmt.Errorf("--topology %q: want ZONESxRACKS, e.g. 2x4", s)
	}
	return &Placement{Zones: zones, RacksPerZone: racks, PodsPerHost: 4, Cost: DefaultTransferCost}, nil
}

// Apply labels the pods with topology.pdgate.io/{region,zone,rack,hostname}: pods fill hosts
// in order (PodsPerHost each), hosts are dealt over the racks round robin, racks belong to
// zones in order. With FleetPD's layout (prefill and decode alternate), every host carries
// both roles.
func (p *Placement) Apply(pods []PodSpec) {
	if p == nil {
		return
	}
	racks := p.Zones * p.RacksPerZone
	for i := range pods {
		host := i / max(1, p.PodsPerHost)
		rack := host % racks
		zone := rack / p.RacksPerZone
		l := pods[i].Labels
		l[podmodel.OverrideRegionLabel] = "region-0"
		l[podmodel.OverrideZoneLabel] = fmt.Sprintf("zone-%d", zone)
		l[podmodel.OverrideRackLabel] = fmt.Sprintf("rack-%d", rack)
		l[podmodel.OverrideHostnameLabel] = fmt.Sprintf("host-%d", host)
	}
}

// String is the layout in words.
func (p *Placement) String() string {
	if p == nil {
		return "none"
	}
	return fmt.Sprintf("%d zones x %d racks, %d pods per host, transfer cost host/rack/zone/region %.2f/%.2f/%.2f/%.2f",
		p.Zones, p.RacksPerZone, p.PodsPerHost, p.Cost[0], p.Cost[1], p.Cost[2], p.Cost[3])
}

// transferTime is the KV transfer between two pods under the placement.
func (s *Sim) transferTime(prefill, decode *pod, tokens int) time.Duration {
	d := s.prof.KVTransferTime(tokens)
	p := s.cfg.Placement
	if p == nil || prefill == nil || decode == nil {
		return d
	}
	lvl := podmodel.CompareTopology(podmodel.TopologyOf(prefill.spec.Labels, podmodel.TopologyLabels{}),
		podmodel.TopologyOf(decode.spec.Labels, podmodel.TopologyLabels{}))
	s.res.transfers[lvl]++
	return time.Duration(float64(d) * p.Cost[lvl])
}
