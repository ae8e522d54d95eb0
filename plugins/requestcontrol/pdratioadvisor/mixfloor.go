package pdratioadvisor

import "time"

// mixMemory keeps the observations the advisor estimated from over the mix look-back, each
// with its engine side: what each mix the pool served needed, per request per second.
//
// The estimate sizes each role for the mix of the last window. A fleet that follows it all
// the way meets a mix shift with the role the last mix needed least: after a phase of long
// outputs and short prompts a 64-GPU fleet had 3 prefill pods left when 13.7k-token prompts
// arrived, and new pods take a provisioning delay to serve. The floor keeps each role at what
// the present arrival rate would need if the requests turned back into the heaviest mix for
// that role in the look-back, as an HPA's minReplicas keeps a floor, but one that follows the
// traffic: it falls with the arrival rate and forgets a mix once the look-back has passed.
type mixMemory struct {
	lookback time.Duration
	samples  []mixSample
}

type mixSample struct {
	at  time.Time
	obs Observation
}

// record adds the observation the estimate used at now. Only a window with its own engine
// side (minSamples completions) and arrivals to scale by is remembered.
func (m *mixMemory) record(now time.Time, o Observation, minSamples int) {
	if m.lookback <= 0 {
		return
	}
	m.prune(now)
	if o.Requests >= minSamples && o.ArrivalRate > 0 {
		m.samples = append(m.samples, mixSample{at: now, obs: o})
	}
}

// prune drops the samples older than the look-back.
func (m *mixMemory) prune(now time.Time) {
	i := 0
	for i < len(m.samples) && now.Sub(m.samples[i].at) > m.lookback {
		i++
	}
	if i > 0 {
		m.samples = append(m.samples[:0], m.samples[i:]...)
	}
}

// floor is, per role, the most any remembered mix needs at the present arrival rate: each
// sample's rates scaled by rate / its own arrival rate, sized by Estimate with the engine
// side measured on that mix (a decode step fitted on short contexts says little about long
// ones). The requests decoding at the time are left out: that term answers a backlog, not
// the mix, and a backlog would hold the floor up for the whole look-back.
func (m *mixMemory) floor(now time.Time, rate float64, p Parameters) Sizing {
	var f Sizing
	m.prune(now)
	if rate <= 0 {
		return f
	}
	for _, s := range m.samples {
		k := rate / s.obs.ArrivalRate
		o := s.obs
		o.PromptRate, o.LocalPromptRate, o.OutputRate, o.DecodeInflight = k*o.PromptRate, k*o.LocalPromptRate, k*o.OutputRate, 0
		e := Estimate(o, p)
		f.Prefill, f.Decode = max(f.Prefill, e.Prefill), max(f.Decode, e.Decode)
	}
	return f
}
