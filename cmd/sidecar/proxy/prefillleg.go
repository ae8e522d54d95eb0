package proxy

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
// when the request is not one for this engine's dialect (d.producerParams).
func peerPrefillBody(d dialect, rq *request) []byte {
	if rq.obj == nil {
		return nil
	}
	key, kept := d.producerParams(rq.obj)
	if kept == nil {
		return nil
	}
	body := sanitized(rq.obj)
	body.SetObject(key, kept)
	return body.Bytes()
}
