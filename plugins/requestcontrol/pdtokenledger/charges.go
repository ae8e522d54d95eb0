package pdtokenledger

// What a scheduling cycle does with the ledger: the transaction Atomically hands its callback
// (read a pod's prefill and decode load, lease prefill and decode work to the picks) and the
// encode leases charged from PreRequest. The ledger's own state, and the releases that end the
// leases, are in ledger.go.

import (
	"math"
	"slices"
	"time"

	"github.com/pdgate/pdgate/plugins/lib/tokenload"
)

// tx is the Tx handed to Atomically callbacks; valid only during the callback.
type tx struct {
	t             *Tracker
	now           time.Time
	nowRel        float64
	meanRate      float64
	meanDone      bool
	sharedChanged bool
}

func (x *tx) Prefill(pod tokenload.PodKey) tokenload.PrefillLoad {
	if ps := x.t.pods[pod]; ps != nil {
		return tokenload.PrefillLoad{ActiveTokens: ps.active, KVTokens: ps.kv}
	}
	return tokenload.PrefillLoad{}
}

func (x *tx) Decode(pod tokenload.PodKey, rate tokenload.DecodeRate) float64 {
	t := x.t
	var r float64
	if t.p.DecodeOutputGrowth && rate != nil {
		r = x.rateFor(pod, rate)
	}
	total := 0.0
	if ps := t.pods[pod]; ps != nil && ps.decN > 0 {
		total = ps.decTokens + t.p.DecodeRequestCost*float64(ps.decN)
		if r > 0 {
			total += r * math.Max(0, float64(ps.decN)*x.nowRel-ps.decSumRel)
		}
	}
	if t.notify != nil {
		t.interest[pod] = x.now
		if rem, ok := t.remote[pod]; ok {
			total += rem.tokens + t.p.DecodeRequestCost*rem.charges
			if r > 0 {
				nowRedis := float64(x.now.UnixNano())/1e9 + t.redisOffset
				total += r * math.Max(0, rem.charges*nowRedis-rem.sumAt)
			}
		}
	}
	return total
}

// rateFor returns the pod's measured rate, else the mean of recently measured pods, else 0.
func (x *tx) rateFor(pod tokenload.PodKey, rate tokenload.DecodeRate) float64 {
	t := x.t
	if v, ok := rate(pod); ok && v > 0 && !math.IsInf(v, 0) && !math.IsNaN(v) {
		t.rates[pod] = rateSample{rate: v, at: x.now}
		return v
	}
	if !x.meanDone {
		x.meanDone = true
		sum, n := 0.0, 0
		for _, s := range t.rates {
			if x.now.Sub(s.at) <= rateFreshness {
				sum += s.rate
				n++
			}
		}
		if n > 0 {
			x.meanRate = sum / float64(n)
		}
	}
	return x.meanRate
}

func validTokens(v float64) bool { return v >= 0 && !math.IsInf(v, 0) && !math.IsNaN(v) }

// ignored reports whether a charge of kind (prefill, decode) lacks its request or pod or has
// no usable token count, and logs the one it ignores.
func (x *tx) ignored(kind, requestID string, pod tokenload.PodKey, tokens float64) bool {
	if requestID != "" && pod != "" && validTokens(tokens) {
		return false
	}
	x.t.log.Info("Ignoring invalid "+kind+" charge", "requestID", requestID, "pod", pod, "tokens", tokens)
	return true
}

func (x *tx) ChargePrefill(c tokenload.PrefillCharge) {
	t := x.t
	if x.ignored("prefill", c.RequestID, c.Pod, c.Tokens) {
		return
	}
	e := t.entry(c.RequestID, x.now)
	if e.prefill != nil && (e.prefill.active || e.prefill.kv) {
		t.log.Info("Request charged twice for prefill; releasing the earlier charge", "requestID", c.RequestID, "pod", e.prefill.pod)
		t.releaseLocked(c.RequestID, e, true, true, false, x.now)
		e = t.entry(c.RequestID, x.now)
	}
	e.prefill = &prefillPart{pod: c.Pod, tokens: c.Tokens, at: x.now, ttl: c.TTL, active: true, kv: true}
	ps := t.pod(c.Pod, x.now)
	ps.active += c.Tokens
	ps.kv += c.Tokens
	ps.activeN++
	ps.kvN++
	ps.gActive.Set(ps.active)
	ps.gKV.Set(ps.kv)
	x.sharedChanged = true
}

func (x *tx) ChargeDecode(c tokenload.DecodeCharge) {
	t := x.t
	if x.ignored("decode", c.RequestID, c.Pod, c.Tokens) {
		return
	}
	e := t.entry(c.RequestID, x.now)
	if e.decode != nil && e.decode.open {
		t.log.Info("Request charged twice for decode; releasing the earlier charge", "requestID", c.RequestID, "pod", e.decode.pod)
		output := e.output
		t.releaseLocked(c.RequestID, e, false, false, true, x.now)
		e = t.entry(c.RequestID, x.now)
		e.output = output
	}
	out := e.output
	if validTokens(c.OutputTokens) && c.OutputTokens > 0 {
		out = c.OutputTokens
	}
	e.decode = &decodePart{pod: c.Pod, tokens: c.Tokens, out: out, at: x.now, atRel: x.nowRel, ttl: c.TTL, open: true}
	ps := t.pod(c.Pod, x.now)
	if ps.gSlots == nil { // only decode pods export the series
		ns, name := splitPod(c.Pod)
		ps.gSlots = t.metrics.decodeSlots.WithLabelValues(ns, name)
	}
	ps.decTokens += c.Tokens
	ps.decN++
	ps.decSumRel += x.nowRel
	if out > 0 {
		ps.decOut += out
		ps.decOutN++
	}
	ps.gD.Set(ps.decTokens)
	ps.gSlots.Set(float64(ps.decN))
	x.sharedChanged = true
}

// releaseEncodeLocked closes an open encode part.
func (t *Tracker) releaseEncodeLocked(en *encodePart, now time.Time) {
	en.open = false
	for _, k := range en.pods {
		ps := t.pod(k, now)
		ps.encN = max(0, ps.encN-1)
		ps.gEnc.Set(float64(ps.encN))
	}
}

// ChargeEncode leases encode work to the encoders a scheduled request was sent to (one request
// each), released with the prefill leg's active part. It is charged from PreRequest, so the
// request counts as confirmed. A second charge of the same request replaces the first.
func (t *Tracker) ChargeEncode(requestID string, pods []tokenload.PodKey, ttl time.Duration) {
	if requestID == "" || len(pods) == 0 {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.clock.Now()
	e := t.entry(requestID, now)
	e.confirmed = true
	if en := e.encode; en != nil && en.open {
		t.releaseEncodeLocked(en, now)
	}
	e.encode = &encodePart{pods: slices.Clone(pods), at: now, ttl: ttl, open: true}
	for _, k := range pods {
		ps := t.pod(k, now)
		if ps.gEnc == nil { // only encoders export the series, not every prefill and decode pod
			ns, name := splitPod(k)
			ps.gEnc = t.metrics.encodeRequests.WithLabelValues(ns, name)
		}
		ps.encN++
		ps.gEnc.Set(float64(ps.encN))
	}
}
