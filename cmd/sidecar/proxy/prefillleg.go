package proxy

import (
	"encoding/json"
	"net/http"
	"strconv"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
)

// A combined pod (prefill and decode on one engine) sits behind a sidecar, and the EPP may pick
// it for the prefill stage of another pod's request: the decode sidecar's prefill leg then
// arrives here, at this sidecar, with no routing header. Its producer-side handoff fields
// (TRT-LLM disaggregated_params.request_type=context_only, vLLM NIXL do_remote_decode=true)
// must reach the engine, or the engine answers an ordinary completion and keeps no KV: a
// generation_first decode waiting for that KV fails (404 from its pull), a context_first or
// vLLM decode silently prefills again. Producer fields name no host the engine connects to, so
// keeping them opens no SSRF; consumer fields (ctx_info_endpoint, opaque_state, remote_host,
// bootstrap_*) are still dropped by sanitized, and the kept object is rebuilt from the known
// producer keys only.

// peerPrefillBody returns the body to send the local engine for a peer's prefill leg, or nil
// when the request is not one for this engine's dialect.
func (p *Proxy) peerPrefillBody(rq *request) []byte {
	if rq.obj == nil {
		return nil
	}
	var key string
	var kept *jsonbody.Object
	switch p.cfg.Engine {
	case EngineTRTLLM:
		key, kept = "disaggregated_params", trtProducerParams(rq.obj)
	case EngineVLLM:
		key, kept = "kv_transfer_params", nixlProducerParams(rq.obj)
	}
	if kept == nil {
		return nil
	}
	body := sanitized(rq.obj)
	body.SetObject(key, kept)
	return body.Bytes()
}

// trtProducerParams rebuilds a context_only disaggregated_params from its producer keys.
func trtProducerParams(obj *jsonbody.Object) *jsonbody.Object {
	dp, ok := obj.Object("disaggregated_params")
	if !ok {
		return nil
	}
	if typ, _ := dp.String("request_type"); typ != "context_only" {
		return nil
	}
	out := jsonbody.New()
	_ = out.Set("request_type", "context_only")
	for _, k := range []string{"disagg_request_id", "schedule_style"} {
		raw, ok := dp.Raw(k)
		if !ok || string(raw) == "null" {
			continue
		}
		if _, err := strconv.ParseUint(string(raw), 10, 64); err != nil {
			return nil // not a plain non-negative integer: not a leg pdgate's sidecar wrote
		}
		out.SetRaw(k, raw)
	}
	return out
}

// nixlProducerParams accepts the NIXL prefill-leg kv_transfer_params (do_remote_decode true,
// no remote peer named) and returns the canonical producer object.
func nixlProducerParams(obj *jsonbody.Object) *jsonbody.Object {
	kv, ok := obj.Object("kv_transfer_params")
	if !ok {
		return nil
	}
	if d, ok := kv.Bool("do_remote_decode"); !ok || !d {
		return nil
	}
	if pr, ok := kv.Bool("do_remote_prefill"); ok && pr {
		return nil
	}
	for _, k := range []string{"remote_host", "remote_port", "remote_engine_id", "remote_block_ids"} {
		if raw, ok := kv.Raw(k); ok && string(raw) != "null" {
			return nil
		}
	}
	out, err := jsonbody.Parse(json.RawMessage(nixlPrefillParams))
	if err != nil {
		return nil
	}
	return out
}

// servePeerPrefill answers a peer's prefill leg from the local engine.
func (p *Proxy) servePeerPrefill(w http.ResponseWriter, r *http.Request, rq *request, body []byte) {
	rq.log.V(1).Info("prefill leg from a peer sidecar served by the local engine")
	p.decode(w, r, rq, body, decodeOpts{outcome: outcomeSkipped})
}
