package pdratioadvisor

import "time"

// mixMemory keeps the per-request demand of the windows the advisor estimated from over the
// mix look-back: their mean prompt, and their mean output with the mean prompt beside it.
//
// The estimate sizes each role for the mix of the last window. A fleet that follows it all
// the way meets a mix shift with the role the last mix needed least: after a phase of long
// outputs and short prompts a 64-GPU fleet had 3 prefill pods left when 13.7k-token prompts
// arrived, and new pods take a provisioning delay to serve. The floor (mixFloor) keeps each
// role at what the present arrival rate would need if the requests turned back into the
// heaviest mix the pool served in the look-back, as an HPA's minReplicas keeps a floor, but
// one that follows the traffic: it falls with the arrival rate and forgets a mix once the
// look-back has passed.
type mixMemory struct {
	lookback time.Duration
	samples  []mixSample
}

// mixSample is one window's mean request. A zero field was not measured in that window.
type mixSample struct {
	at time.Time
	// prompt is the mean prompt of the window's arrivals; output the mean output of its
	// completions, outputPrompt those completions' window's mean prompt (their KV footprint).
	prompt, output, outputPrompt float64
}

// record adds the window's mean request at now: the prompt when enough requests arrived, the
// output when enough completed (minSamples each, as the estimate itself requires).
func (m *mixMemory) record(now time.Time, o Observation, minSamples int) {
	if m.lookback <= 0 {
		return
	}
	var s mixSample
	if o.Arrivals >= minSamples {
		s.prompt = o.MeanPrompt
	}
	if o.Requests >= minSamples {
		s.output, s.outputPrompt = o.MeanOutput, o.MeanPrompt
	}
	m.prune(now)
	if s.prompt > 0 || s.output > 0 {
		s.at = now
		m.samples = append(m.samples, s)
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

// heaviest is the largest mean prompt, and the largest mean output with its prompt, of the
// look-back.
func (m *mixMemory) heaviest(now time.Time) (prompt, output, outputPrompt float64) {
	m.prune(now)
	for _, s := range m.samples {
		prompt = max(prompt, s.prompt)
		if s.output > output {
			output, outputPrompt = s.output, s.outputPrompt
		}
	}
	return prompt, output, outputPrompt
}

// mixFloor is the size each role needs for the present arrival rate if every request were
// the look-back's heaviest: the prefill floor from its largest mean prompt, the decode floor
// from its largest mean output, each through Estimate with the engine side measured now. It
// is the advice's floor per role (0: no floor, nothing remembered or nothing arriving). The
// prefill floor counts only the share of arrivals that get a prefill pod: a prompt the
// deciders keep on its decode pod is no prefill demand in any mix.
func mixFloor(o Observation, prompt, output, outputPrompt float64, p Parameters) Sizing {
	var f Sizing
	if o.ArrivalRate <= 0 {
		return f
	}
	if all := o.PromptRate + o.LocalPromptRate; prompt > 0 && all > 0 {
		remote := o.ArrivalRate * o.PromptRate / all
		f.Prefill = Estimate(Observation{PromptRate: remote * prompt, MeanPrompt: prompt,
			PrefillRate: o.PrefillRate, Transfer: o.Transfer}, p).Prefill
	}
	if output > 0 {
		f.Decode = Estimate(Observation{OutputRate: o.ArrivalRate * output, MeanPrompt: outputPrompt, MeanOutput: output,
			Step: o.Step, MaxBatch: o.MaxBatch, KVTokens: o.KVTokens}, p).Decode
	}
	return f
}
