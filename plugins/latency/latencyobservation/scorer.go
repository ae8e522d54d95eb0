// Package latencyobservation is llm-d v0.11's latency-observation-scorer-hub: it predicts each
// candidate's time to first token at its in-flight load right now, from the anchors
// latency-observer-producer-hub publishes (plugins/latency/internal/ttftpercentiles), and scores the
// lowest prediction highest. Under-observed endpoints are explored at explorationRate.
package latencyobservation

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"slices"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pickerkit"
	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/latency/internal/ttftpercentiles"
)

// Type is the plugin type name.
const Type = ttftpercentiles.ScorerType

// Parameters are llm-d's.
type Parameters struct {
	ExplorationRate             float64 `json:"explorationRate"`
	MinInflightGap              float64 `json:"minInflightGap"`
	RoundTTFTStep               float64 `json:"roundTTFTStep"`
	TTFTPercentilesProducerName string  `json:"ttftPercentilesProducerName"`
	InFlightLoadProducerName    string  `json:"inFlightLoadProducerName"`
}

// Validate applies llm-d's ranges.
func (p *Parameters) Validate() error {
	switch {
	case p.ExplorationRate < 0 || p.ExplorationRate > 1:
		return fmt.Errorf("explorationRate must be in [0, 1], got %g", p.ExplorationRate)
	case p.MinInflightGap <= 0:
		return fmt.Errorf("minInflightGap must be > 0, got %g", p.MinInflightGap)
	case p.RoundTTFTStep < 0:
		return fmt.Errorf("roundTTFTStep must be >= 0, got %g", p.RoundTTFTStep)
	}
	return nil
}

// ParseParameters decodes, defaults (explorationRate 0.1, minInflightGap 2.0, roundTTFTStep 0;
// an explicit 0 is kept) and validates; errors name the plugin and the field.
func ParseParameters(name string, raw json.RawMessage) (p Parameters, err error) {
	p = Parameters{ExplorationRate: 0.1, MinInflightGap: 2.0}
	return p, pluginkit.Decode(Type, name, raw, &p)
}

// Scorer is latency-observation-scorer-hub.
type Scorer struct {
	tn      fwkplugin.TypedName
	params  Parameters
	dataKey string
	rand    *pickerkit.Rand
}

var _ fwksched.Scorer = (*Scorer)(nil)

// Factory builds the scorer.
func Factory(name string, raw json.RawMessage, handle fwkplugin.Handle) (fwkplugin.Plugin, error) {
	return pluginkit.Build(name, raw, ParseParameters, func(name string, p Parameters) *Scorer {
		tn := pluginkit.TypedName(Type, name)
		producer := p.TTFTPercentilesProducerName
		if producer == "" {
			producer = ttftpercentiles.ProducerType
		}
		return &Scorer{tn: tn, params: p, dataKey: ttftpercentiles.DataKey(producer), rand: pickerkit.RandFor(handle, tn.Name)}
	})
}

// TypedName implements fwkplugin.Plugin.
func (s *Scorer) TypedName() fwkplugin.TypedName { return s.tn }

// Category: the scorer spreads load.
func (s *Scorer) Category() fwksched.ScorerCategory { return fwksched.Distribution }

// ResolveReferences finds the producer to read: the one named, else the only one configured,
// else a new one with llm-d's defaults (llm-d auto-creates it from the scorer's required data
// key; pdgate's ticks by itself, so it does not leave endpoints cold). It also makes sure an
// inflight-load-producer runs.
func (s *Scorer) ResolveReferences(handle fwkplugin.Handle) error {
	name := s.params.TTFTPercentilesProducerName
	if name != "" {
		p := handle.Plugin(name)
		if p == nil {
			return pluginkit.Errorf(Type, s.tn.Name, "ttftPercentilesProducerName: no plugin named %q", name)
		}
		if p.TypedName().Type != ttftpercentiles.ProducerType {
			return pluginkit.Errorf(Type, s.tn.Name, "ttftPercentilesProducerName: plugin %q is a %s, not a %s", name, p.TypedName().Type, ttftpercentiles.ProducerType)
		}
	} else {
		var found []string
		for n, p := range handle.GetAllPluginsWithNames() {
			if p.TypedName().Type == ttftpercentiles.ProducerType {
				found = append(found, n)
			}
		}
		slices.Sort(found) // the handle's map order is random; the error names them stably
		switch len(found) {
		case 0:
			if err := ttftpercentiles.AddByType(handle, ttftpercentiles.ProducerType); err != nil {
				return pluginkit.Errorf(Type, s.tn.Name, "%w", err)
			}
			name = ttftpercentiles.ProducerType
		case 1:
			name = found[0]
		default:
			return pluginkit.Errorf(Type, s.tn.Name, "%d %s plugins are configured (%v); name one in ttftPercentilesProducerName", len(found), ttftpercentiles.ProducerType, found)
		}
	}
	s.dataKey = ttftpercentiles.DataKey(handle.Plugin(name).TypedName().Name)
	if err := ttftpercentiles.EnsureInFlightProducer(handle, s.params.InFlightLoadProducerName); err != nil {
		return pluginkit.Errorf(Type, s.tn.Name, "%w", err)
	}
	return nil
}

type candidate struct {
	ep         fwksched.Endpoint
	pred       float64
	cold       bool
	calibrated bool
}

// Score predicts each candidate's TTFT and scores (maxTTFT − pred)/(maxTTFT − minTTFT), the
// range taken over the calibrated candidates, or over every candidate with a floor when none
// is calibrated; cold ones are seeded at minTTFT. When a calibrated candidate exists, each
// under-observed one scores 1.0 with probability explorationRate and 0 otherwise.
func (s *Scorer) Score(_ context.Context, _ *fwksched.CycleState, _ *fwksched.LLMRequest, endpoints []fwksched.Endpoint) map[fwksched.Endpoint]float64 {
	cands := make([]candidate, len(endpoints))
	anyCalibrated := false
	for i, ep := range endpoints {
		cands[i] = s.predict(ep)
		anyCalibrated = anyCalibrated || cands[i].calibrated
	}
	// The range is the calibrated candidates' when there are any (the others' scores are then
	// overridden, so they must not move the winners'), else every candidate with a floor's.
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, c := range cands {
		if !c.cold && (c.calibrated || !anyCalibrated) {
			lo, hi = min(lo, c.pred), max(hi, c.pred)
		}
	}
	out := make(map[fwksched.Endpoint]float64, len(endpoints))
	for _, c := range cands {
		score := 1.0
		if !c.cold && hi > lo {
			score = (hi - c.pred) / (hi - lo)
		}
		if anyCalibrated && !c.calibrated {
			score = 0
			if s.params.ExplorationRate > 0 && s.rand.Float64() < s.params.ExplorationRate {
				score = 1
			}
		}
		out[c.ep] = score
	}
	return out
}

// predict classifies ep (cold: no floor yet; seed: a floor but no trusted curve, predicted at
// the floor; calibrated: the curve at the live in-flight count) and predicts its TTFT. An
// unreadable in-flight count leaves the endpoint uncalibrated.
func (s *Scorer) predict(ep fwksched.Endpoint) candidate {
	m := ttftpercentiles.Read(ep, s.dataKey)
	floor := m.Floor()
	if floor == 0 {
		return candidate{ep: ep, cold: true}
	}
	inflight, ok := ttftpercentiles.InFlight(ep)
	c := candidate{ep: ep, pred: floor}
	if ok && m.RecentRequestCount >= m.CalibrationThreshold && m.InflightAtTypicalLoad > 0 && m.TypicalLoadTTFT > floor {
		c.calibrated, c.pred = true, s.curve(m, floor, float64(inflight))
	}
	if step := s.params.RoundTTFTStep; step > 0 {
		c.pred = math.Round(c.pred/step) * step
	}
	return c
}

// curve interpolates the TTFT at x requests in flight: A = (0, floor), B = (InflightAtLowLoad,
// LowLoadTTFT), C = (InflightAtTypicalLoad, TypicalLoadTTFT); A→B below B and B→C (extended
// past C) above it when B is admissible, else A→C extended. Never below the floor.
func (s *Scorer) curve(m *ttftpercentiles.TTFTPercentiles, floor, x float64) float64 {
	xl, yl, xt, yt := m.InflightAtLowLoad, m.LowLoadTTFT, m.InflightAtTypicalLoad, m.TypicalLoadTTFT
	var pred float64
	switch {
	case xt-xl >= s.params.MinInflightGap && yt > yl && yl > floor && xl > 0:
		if x < xl {
			pred = floor + x*(yl-floor)/xl
		} else {
			pred = yl + (x-xl)*(yt-yl)/(xt-xl)
		}
	default:
		pred = floor + x*(yt-floor)/xt
	}
	return max(pred, floor)
}
