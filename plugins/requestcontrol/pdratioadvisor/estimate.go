package pdratioadvisor

import (
	"math"
	"time"
)

// Observation is what the EPP measured over the sliding window, the estimate's only input:
// no offline profile of the engine.
type Observation struct {
	// Requests is the number of requests completed in the window, Arrivals the number
	// scheduled.
	Requests, Arrivals int
	// ArrivalRate is the requests per second scheduled or refused for capacity.
	ArrivalRate float64
	// PromptRate is the prompt tokens per second of arrivals that got a prefill pod;
	// LocalPromptRate those prefilled on their decode pod (they load the decode tier and are
	// already in its measured TPOT).
	PromptRate, LocalPromptRate float64
	// OutputRate is the output tokens per second arriving: arrivals times the mean output of
	// the requests completed in the window (arrival-based, so an overload that completes less
	// than it receives still shows its whole demand).
	OutputRate float64
	// DecodeInflight is the requests past their first token now. Output lengths are known
	// only at completion, so when long outputs start arriving the rate lags; the population
	// already decoding does not.
	DecodeInflight int
	// MeanPrompt and MeanOutput are tokens per request: the prompt of the arrivals, the
	// output of the completions. CompletedPrompt is the mean prompt of those completions (at a
	// change of mix the arrivals are already of the new one).
	MeanPrompt, MeanOutput, CompletedPrompt float64
	// PrefillRate is the prompt tokens per second one prefill pod processes while it has
	// prefill work (0: not measured yet).
	PrefillRate float64
	// Step is the decode step (seconds per token) fitted against the decode batch size.
	Step StepFit
	// MaxBatch is the largest mean decode batch of a request seen in the window.
	MaxBatch float64
	// KVTokens is a decode pod's KV-cache capacity in tokens (0: unknown).
	KVTokens int
	// Transfer is the mean time from the end of the prefill leg to the first token (KV
	// transfer and the first decode step; 0 when the EPP gets no prefill-release callback).
	Transfer time.Duration
}

// StepFit is decode step time = Base + PerSeq × batch (seconds), a least-squares line through
// the (batch, TPOT) pairs of completed requests.
type StepFit struct {
	Base, PerSeq float64
}

// At is the fitted step at batch b.
func (f StepFit) At(b float64) float64 { return f.Base + f.PerSeq*b }

// fitSums accumulate the least-squares sums of (batch, TPOT) pairs.
type fitSums struct{ n, x, y, xx, xy float64 }

func (s *fitSums) add(x, y float64) {
	s.n++
	s.x += x
	s.y += y
	s.xx += x * x
	s.xy += x * y
}

func (s *fitSums) merge(o fitSums) {
	s.n += o.n
	s.x += o.x
	s.y += o.y
	s.xx += o.xx
	s.xy += o.xy
}

// fit is the line through the pairs. When the batches seen do not spread enough to give a
// rising line, the step is taken proportional to the batch through the mean pair: that
// overestimates the step above the batches seen, so extrapolation errs towards more decode.
func (s fitSums) fit() StepFit {
	if s.n == 0 || s.x <= 0 {
		return StepFit{}
	}
	mx, my := s.x/s.n, s.y/s.n
	if den := s.xx/s.n - mx*mx; den > 1e-9*mx*mx && s.n >= 3 {
		b := (s.xy/s.n - mx*my) / den
		a := my - b*mx
		if b > 0 && a >= 0 {
			return StepFit{Base: a, PerSeq: b}
		}
		if b > 0 && s.xx > 0 {
			// a line through the origin: the least-squares slope with no intercept
			return StepFit{PerSeq: s.xy / s.xx}
		}
	}
	return StepFit{PerSeq: my / mx}
}

// Sizing is the raw replica count per role, before hysteresis.
type Sizing struct {
	Prefill, Decode int
	// DecodeBatch is the batch per decode pod the sizing aims at; PrefillUtilization the busy
	// share per prefill pod (reported in the README's terms, for debugging).
	DecodeBatch        float64
	PrefillUtilization float64
}

// Estimate sizes the prefill and the decode tier for the observed demand under the SLO.
//
// Prefill: a pod serves PrefillRate tokens per second while busy; a request's prefill takes
// S = MeanPrompt / PrefillRate. Treating the tier as M/D/1 queues, the mean wait is
// ρ/(2(1−ρ))·S, so the TTFT budget left after the transfer, TTFT − Transfer, allows the
// utilisation ρ = 2h/(1+2h) with h = (TTFT − Transfer)/S − 1, capped at maxPrefillUtilization
// (and floored at minPrefillUtilization when the budget is already spent unloaded). The tier
// needs PromptRate / (ρ·PrefillRate) pods.
//
// Decode: the largest batch B whose fitted step stays within tpotHeadroom × TPOT, further
// bounded by the KV cache (kvHeadroom × capacity / (prompt + MeanOutput/2) resident tokens
// per request, the prompt of the completed requests whose outputs these are),
// by maxBatch, and by twice the largest batch seen (no extrapolation far beyond what was
// measured). A pod then emits B / step(B) tokens per second; the tier needs OutputRate of them,
// and at least DecodeInflight / B pods for the requests decoding now.
func Estimate(o Observation, p Parameters) Sizing {
	var s Sizing
	if o.PromptRate > 0 && o.PrefillRate > 0 {
		svc := o.MeanPrompt / o.PrefillRate
		rho := p.MaxPrefillUtilization
		if svc > 0 {
			budget := (time.Duration(p.TTFTMs)*time.Millisecond - o.Transfer).Seconds()
			h := budget/svc - 1
			rho = p.MinPrefillUtilization
			if h > 0 {
				rho = math.Min(math.Max(2*h/(1+2*h), p.MinPrefillUtilization), p.MaxPrefillUtilization)
			}
		}
		s.PrefillUtilization = rho
		s.Prefill = ceilReplicas(o.PromptRate / (rho * o.PrefillRate))
	}
	if (o.OutputRate > 0 || o.DecodeInflight > 0) && o.Step.PerSeq > 0 {
		target := p.TPOTHeadroom * (time.Duration(p.TPOTMs) * time.Millisecond).Seconds()
		b := (target - o.Step.Base) / o.Step.PerSeq
		b = math.Min(b, float64(p.MaxBatch))
		if o.MaxBatch > 0 {
			b = math.Min(b, 2*o.MaxBatch)
		}
		prompt := o.MeanPrompt
		if o.CompletedPrompt > 0 {
			// the outputs are the completed requests', so their own prompts are what each
			// holds in the cache beside them. In a window that spans a change of mix the
			// arrivals' prompts are already the next mix's: 13.7k-token prompts paired with
			// the last mix's 2,500-token outputs sized decode for a request heavier than
			// either, and turned a fleet towards decode as long prompts arrived.
			prompt = o.CompletedPrompt
		}
		if resident := prompt + o.MeanOutput/2; o.KVTokens > 0 && resident > 0 {
			b = math.Min(b, p.KVHeadroom*float64(o.KVTokens)/resident)
		}
		b = math.Max(math.Floor(b), 1)
		s.DecodeBatch = b
		s.Decode = max(ceilReplicas(o.OutputRate/(b/o.Step.At(b))), ceilReplicas(float64(o.DecodeInflight)/b))
	}
	return s
}

// ceilReplicas rounds a fractional replica need up, ignoring float noise just above a whole
// number.
func ceilReplicas(x float64) int {
	return int(math.Ceil(x - 1e-9))
}
