package proxy

import (
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// nixlPrefillParams asks vLLM to prefill for a remote decoder (llm-d nixlv2, AIBrix shfs).
const nixlPrefillParams = `{"do_remote_decode":true,"do_remote_prefill":false,"remote_engine_id":null,"remote_block_ids":null,"remote_host":null,"remote_port":null}`

// connectorFor returns the request's connector: the prefill pod's declared one when the EPP
// sent it, else the flag.
func (p *Proxy) connectorFor(rq *request) (Connector, bool) {
	if rq.prefillConnector == "" {
		return p.cfg.KVConnector, true
	}
	c := Connector(strings.ToLower(rq.prefillConnector))
	return c, oneOf(c, Connectors)
}

// runVLLM: sequential prefill, then decode with the prefiller's KV parameters.
func (p *Proxy) runVLLM(w http.ResponseWriter, r *http.Request, rq *request) {
	conn, ok := p.connectorFor(rq)
	if !ok {
		p.setupFailure(w, r, rq, "unsupported KV connector "+rq.prefillConnector+" (supported: "+join(Connectors)+")")
		return
	}
	if conn == ConnectorSharedStorage {
		p.runSharedStorage(w, r, rq)
		return
	}
	if rejectDuplicates(w, rq) {
		return
	}
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, true)
	if conn != ConnectorNeuronNIXL {
		pre.SetRaw("kv_transfer_params", json.RawMessage(nixlPrefillParams))
	}
	resp, dur, lerr := p.sequentialPrefill(r, rq, pre.Bytes())
	if lerr != nil {
		p.prefillFailed(w, r, rq, lerr)
		return
	}
	end := time.Now()
	dec := sanitized(rq.obj)
	outcome := outcomeOK
	switch conn {
	case ConnectorNeuronNIXL:
		dec.SetObject("disagg_prefill_resp", resp)
	default:
		params, found := resp.Object("kv_transfer_params")
		if !found {
			// Without parameters the decode engine prefills by itself.
			rq.log.Info("prefill response carries no kv_transfer_params; decode prefills locally")
			p.report.diverted(rq, outcomeFallback, reasonNoKVParams)
			outcome = outcomeFallback
			break
		}
		if conn == ConnectorSHFS {
			_ = params.Set("remote_host", rq.prefill.Host)
		}
		p.ranks.pin(rq, params)
		dec.SetObject("kv_transfer_params", params)
	}
	cached := cachedTokens(resp)
	p.decode(w, r, rq, dec.Bytes(), decodeOpts{outcome: outcome, prefillDur: dur, prefillEnd: end, rewriteCached: &cached})
}

// cachedTokens reads usage.prompt_tokens_details.cached_tokens (0 when absent).
func cachedTokens(resp *jsonbody.Object) int64 {
	usage, ok := resp.Object("usage")
	if !ok {
		return 0
	}
	details, ok := usage.Object("prompt_tokens_details")
	if !ok {
		return 0
	}
	raw, ok := details.Raw("cached_tokens")
	if !ok {
		return 0
	}
	var n json.Number
	if json.Unmarshal(raw, &n) != nil {
		return 0
	}
	v, err := n.Int64()
	if err != nil || v < 0 {
		return 0
	}
	return v
}

// runSharedStorage: with cache_hit_threshold in the body, decode first and prefill only when
// the engine answers finish_reason cache_threshold; without it, prefill then decode.
func (p *Proxy) runSharedStorage(w http.ResponseWriter, r *http.Request, rq *request) {
	if rejectDuplicates(w, rq, "cache_hit_threshold") {
		return
	}
	if rq.obj.Has("cache_hit_threshold") {
		if !p.decode(w, r, rq, localBody(rq), decodeOpts{outcome: outcomeSkipped, probe: true}) {
			p.report.diverted(rq, outcomeSkipped, reasonCacheHit)
			return
		}
		rq.log.V(1).Info("decode answered cache_threshold; running prefill")
	}
	pre := sanitized(rq.obj)
	applyPrefillControls(pre, rq.api, true)
	pre.SetInt("cache_hit_threshold", 0)
	_, dur, lerr := p.sequentialPrefill(r, rq, pre.Bytes())
	if lerr != nil {
		p.prefillFailedSharedStorage(w, r, rq, lerr)
		return
	}
	dec := sanitized(rq.obj)
	dec.SetInt("cache_hit_threshold", 0)
	p.decode(w, r, rq, dec.Bytes(), decodeOpts{outcome: outcomeOK, prefillDur: dur, prefillEnd: time.Now()})
}

// prefillFailedSharedStorage: a local fallback must disable the threshold, or the engine
// would answer cache_threshold again.
func (p *Proxy) prefillFailedSharedStorage(w http.ResponseWriter, r *http.Request, rq *request, lerr *legError) {
	if p.cfg.FailurePolicy == FallbackLocal && !lerr.clientError() && r.Context().Err() == nil {
		p.report.diverted(rq, outcomeFallback, lerr.class)
		dec := sanitized(rq.obj)
		dec.SetInt("cache_hit_threshold", 0)
		p.decode(w, r, rq, dec.Bytes(), decodeOpts{outcome: outcomeFallback})
		return
	}
	p.prefillFailed(w, r, rq, lerr)
}
