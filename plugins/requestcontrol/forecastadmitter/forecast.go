package forecastadmitter

import (
	"math"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// Pod is one candidate as the forecast sees it.
type Pod struct {
	Kind   Kind
	Leases tokenload.Leases
	// Scraped is the engine's last scraped running + waiting requests: a floor on the decode
	// batch when other routers (or requests the ledger never saw) send it work. Waiting
	// requests count as held, not as a sign the engine is full: an engine lists every request
	// that arrived since its last step as waiting, and a P/D decode engine every request whose
	// KV is still being pulled, so a pod serving well below its capacity often shows some.
	Scraped int
	// KVCapacity is the engine's KV cache in tokens (0 = unknown: the cost profile's);
	// KVUsage the scraped share of it in use, a floor on the leases' estimate (sequences the
	// ledger never saw, budgets it does not know).
	KVCapacity int
	KVUsage    float64
}

// Kind is what a pod can do for a request.
type Kind int

// The kinds: a prefill-tier pod runs prefill legs; a decode-tier pod decodes (and prefills a
// request kept decode-only); a combined pod serves whole requests.
const (
	KindNone Kind = iota
	KindPrefill
	KindDecode
	KindCombined
)

// Demand is one request's work.
type Demand struct {
	PromptTokens int
	OutputTokens int  // max_tokens, else the profile's mean output
	DecodeOnly   bool // the decider keeps it on its decode pod (no prefill leg)
	// LeasedOutput is the output budget a held sequence whose lease carries none is taken to
	// have (the mean of recently admitted requests); 0 = the profile's meanOutputTokens.
	LeasedOutput float64
}

// Forecast is the best placement's forecast.
type Forecast struct {
	// TTFT is prefill wait + prefill + KV transfer + the first decode step; TPOT is the
	// decode step with the request in the batch.
	TTFT, TPOT time.Duration
	// PrefillWait is the queued prefill work ahead of the request there.
	PrefillWait time.Duration
	// Met reports whether that placement meets both targets.
	Met bool
	// Serving is the number of pods that could decode the request (0: nothing is serving);
	// Room the number of them whose KV cache holds it now (the forecast is theirs).
	Serving, Room int
	// Output is the request's output budget the forecast used (max_tokens, else the mean).
	Output int
}

// Predict forecasts the request on every placement the pods offer and returns the one that
// meets ttft and tpot with the most slack (the least max(TTFT/ttft, TPOT/tpot)); when none meets
// them, the one that misses by least. A decode pod whose KV cache cannot hold the request next to
// what it holds is no placement (the engine would queue the request until some sequence ends).
func (c Cost) Predict(pods []Pod, d Demand, ttft, tpot time.Duration, requestCost float64) Forecast {
	if d.OutputTokens <= 0 {
		d.OutputTokens = c.MeanOutputTokens
	}
	if !(d.LeasedOutput > 0) {
		d.LeasedOutput = float64(c.MeanOutputTokens)
	}
	remoteWait, remote := math.Inf(1), false
	if !d.DecodeOnly {
		for _, p := range pods {
			if p.Kind == KindPrefill {
				remoteWait, remote = math.Min(remoteWait, c.queuedMs(p.Leases, requestCost)), true
			}
		}
	}
	prefill := c.prefillMs(d.PromptTokens)
	best := Forecast{Output: d.OutputTokens}
	bestScore := math.Inf(1)
	for _, p := range pods {
		if p.Kind != KindDecode && p.Kind != KindCombined {
			continue
		}
		best.Serving++
		if !c.fits(p, d) {
			continue
		}
		best.Room++
		batch := max(p.Leases.DecodeSlots, p.Scraped) + 1
		// resident KV: the prompts held, each sequence half-way through its own output budget
		// on average
		kv := p.Leases.DecodeTokens + outputs(p.Leases, batch-1, d.LeasedOutput)/2 + float64(d.PromptTokens) + float64(d.OutputTokens)/2
		step := c.stepMs(batch, kv)
		var wait, ttftMs float64
		if remote && p.Kind == KindDecode {
			wait = remoteWait
			ttftMs = wait + prefill + c.transferMs(d.PromptTokens) + step
		} else {
			wait = c.queuedMs(p.Leases, requestCost)
			ttftMs = wait + prefill + step
		}
		score := math.Max(ttftMs/ms(ttft), step/ms(tpot))
		if score < bestScore {
			bestScore = score
			best.TTFT, best.TPOT, best.PrefillWait = dur(ttftMs), dur(step), dur(wait)
		}
	}
	best.Met = bestScore <= 1
	return best
}

// fits reports whether the pod takes the request at once: its KV cache holds the request's
// prompt and output next to what it holds (the leased prompts with an output budget reserved
// for each sequence the leases or the scrape show, as an engine that admits a sequence only
// with room for its output does, or the scraped usage when that is more). An engine that
// queues for want of KV shows it here: its queued sequences are in the scraped batch.
func (c Cost) fits(p Pod, d Demand) bool {
	capacity := p.KVCapacity
	if capacity <= 0 {
		capacity = c.KVCapacityTokens
	}
	if capacity <= 0 {
		return true
	}
	held := math.Max(p.Leases.DecodeTokens+outputs(p.Leases, max(p.Leases.DecodeSlots, p.Scraped), d.LeasedOutput), p.KVUsage*float64(capacity))
	return held+float64(d.PromptTokens+d.OutputTokens) <= float64(capacity)
}

// outputs is the output budget of n held sequences: the leases' own budgets, and the mean for
// each sequence whose lease carries none (or that only the scraped batch shows).
func outputs(l tokenload.Leases, n int, mean float64) float64 {
	return l.DecodeOutputTokens + float64(max(n-l.DecodeBudgeted, 0))*mean
}

// queuedMs is the prefill work leased to a pod, in engine time: its legs taken as of the mean
// leg's length (the ledger's per-leg requestCost, which stands for the step overhead in token
// units, taken off), each with its chunks' step overheads and its attention term.
func (c Cost) queuedMs(l tokenload.Leases, requestCost float64) float64 {
	if l.PrefillLegs <= 0 {
		// tokens with no leg count: a ledger that does not count legs; the linear rate only
		return l.PrefillTokens * c.Prefill.LinearMsPerToken
	}
	perLeg := math.Max(0, l.PrefillTokens/float64(l.PrefillLegs)-requestCost)
	return float64(l.PrefillLegs) * c.prefillMs(int(math.Round(perLeg)))
}

// prefillMs is a lone prompt's prefill: one step overhead per chunk, the linear and the causal
// attention terms.
func (c Cost) prefillMs(n int) float64 {
	if n <= 0 {
		return 0
	}
	steps := 1
	if c.ChunkedPrefillTokens > 0 {
		steps = (n + c.ChunkedPrefillTokens - 1) / c.ChunkedPrefillTokens
	}
	fn := float64(n)
	return float64(steps)*c.Prefill.OverheadMs + c.Prefill.LinearMsPerToken*fn + c.Prefill.QuadraticMsPerToken2*fn*fn
}

func (c Cost) transferMs(n int) float64 {
	t := c.KVTransfer.LatencyMs
	if c.KVTransfer.BytesPerToken > 0 && c.KVTransfer.BandwidthGBps > 0 {
		t += float64(n) * c.KVTransfer.BytesPerToken / (c.KVTransfer.BandwidthGBps * 1e9) * 1e3
	}
	return t
}

func (c Cost) stepMs(batch int, kv float64) float64 {
	return c.Decode.BaseMs + c.Decode.PerSeqMs*float64(batch) + c.Decode.PerKVTokenMs*kv
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func dur(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }
