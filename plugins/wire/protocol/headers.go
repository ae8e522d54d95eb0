// Package protocol holds the wire contract shared by the EPP plugins, the EPP's ext_proc
// server and the routing sidecar: header names, the host:port list format, the RFC 7240
// Prefer parsing and the OpenAI-shaped error body. It imports nothing from GIE so that the
// sidecar can use it without pulling the EPP framework in.
package protocol

import "strings"

// Headers the EPP writes for the sidecar. The EPP overwrites or clears each of them on every
// request it schedules, so a client can never choose where prefill or encode traffic goes.
const (
	// HeaderPrefillerHostPort names the prefill endpoint (host:port, IPv6 bracketed).
	HeaderPrefillerHostPort = "x-prefiller-host-port"
	// HeaderEncoderHostsPorts lists the encode endpoints, comma-joined.
	HeaderEncoderHostsPorts = "x-encoder-hosts-ports"
	// HeaderPrefillerBootstrapPort carries the SGLang bootstrap port of the picked prefill pod
	// (from its model.aibrix.ai/sglang-bootstrap-port annotation). pdgate extension.
	HeaderPrefillerBootstrapPort = "x-pdgate-prefiller-bootstrap-port"
	// HeaderPrefillerEngine carries the engine of the picked prefill pod (vllm, sglang, trtllm).
	HeaderPrefillerEngine = "x-pdgate-prefiller-engine"
	// HeaderPrefillerKVConnector carries the KV connector of the picked prefill pod when the
	// pod declares one (model.aibrix.ai/kv-connector-type). pdgate extension.
	HeaderPrefillerKVConnector = "x-pdgate-prefiller-kv-connector"
	// HeaderDataParallelHostPort is llm-d's data-parallel header: the decode rank's original
	// host:port, written by pd-profile-handler when primaryPort is set (the decode pick's port
	// is rewritten to the primary rank). pdgate's sidecar does not route on it, but an llm-d
	// sidecar does, so a client must never be able to choose it.
	HeaderDataParallelHostPort = "x-data-parallel-host-port"
	// HeaderSidecarKnobs carries the sidecar knobs of the request's resolved
	// model.aibrix.ai/config profile (routingConfig.pd.prefillRequestTimeout, …): without it a
	// per-profile timeout would be accepted by the EPP and never reach the sidecar that runs
	// the legs. Format and rules: knobs.go. pdgate extension.
	HeaderSidecarKnobs = "x-pdgate-sidecar-knobs"
	// HeaderPrefillerAlternateHostPort names a second prefill endpoint of the same roleset as
	// x-prefiller-host-port: the sidecar's one prefill retry goes there instead of back to the
	// pod that just failed. Written only when the prefill profile picked two endpoints of one
	// roleset. pdgate extension.
	HeaderPrefillerAlternateHostPort = "x-pdgate-prefiller-alternate-host-port"
	// HeaderPrefillRelease carries the EPP's prefill-release callback for the request:
	// http://<host:port>/pdgate/v1/prefill-released?id=<request id>&sig=<hex HMAC-SHA256>
	// (PrefillReleasePath). The sidecar POSTs to it when the prefill leg returns, so the
	// prefill pod's active-token charge ends then, not when the first response headers reach
	// the EPP (the end of generation for a non-streaming request). Written only when the EPP
	// runs with --prefill-release-address and the request has a prefill target. pdgate
	// extension.
	HeaderPrefillRelease = "x-pdgate-prefill-release"
	// HeaderDecoderPort carries the engine port of the picked decode pod when the pod declares
	// one (model.aibrix.ai/port, validated by plugins/lib/podmodel: a decimal in 1..65535) other
	// than the endpoint's port. The EPP still routes the request to the endpoint's port (the
	// pool's target port, where the decode pod's sidecar listens); the sidecar sends that
	// request's decode leg to this port on its configured engine host (--engine-url's host:
	// only the port changes). Absent: --engine-url as configured. pdgate extension.
	HeaderDecoderPort = "x-pdgate-decoder-port"
)

// PrefillReleasePath is the path of the EPP's prefill-release callback (HeaderPrefillRelease);
// the sidecar calls no other path through that header.
const PrefillReleasePath = "/pdgate/v1/prefill-released"

// RoutingHeaders are every request header that steers the sidecar. The EPP clears all of
// them on the way in and the sidecar removes all of them before the engine sees the request.
var RoutingHeaders = []string{
	HeaderPrefillerHostPort,
	HeaderEncoderHostsPorts,
	HeaderPrefillerBootstrapPort,
	HeaderPrefillerEngine,
	HeaderPrefillerKVConnector,
	HeaderDataParallelHostPort,
	HeaderSidecarKnobs,
	HeaderPrefillerAlternateHostPort,
	HeaderPrefillRelease,
	HeaderDecoderPort,
}

// Client request headers with meaning to pdgate.
const (
	// HeaderPrefer carries RFC 7240 preferences; "if-available" asks for conditional decode.
	HeaderPrefer = "prefer"
	// HeaderSessionKey names an AIBrix session for the token-load ledger's session delta.
	HeaderSessionKey = "x-aibrix-session-key"
	// HeaderConfigProfile selects a model.aibrix.ai/config profile ("auto" allowed).
	HeaderConfigProfile = "config-profile"
	// HeaderRoutingStrategy selects an AIBrix routing strategy per request.
	HeaderRoutingStrategy = "routing-strategy"
	// HeaderTrace asks the EPP to return a decision trace (value "1" or "true").
	HeaderTrace = "x-pdgate-trace"
)

// Response headers.
const (
	// HeaderErrorPrefill marks a response that failed in the prefill leg.
	HeaderErrorPrefill = "x-error-pd-prefill"
	// HeaderErrorDecode marks a response that failed in the decode leg (watchdog, engine).
	HeaderErrorDecode = "x-error-pd-decode"
	// HeaderErrorEncode marks a response that failed in the encode fan-out (E/P/D): an encoder
	// call failed, so neither prefill nor decode ran. pdgate extension, named like llm-d's two.
	HeaderErrorEncode = "x-error-pd-encode"
	// HeaderDecision is the compact decision trace the EPP returns when asked.
	HeaderDecision = "x-pdgate-decision"
	// HeaderPrefillOutcome is set by the sidecar on the response: "ok", "failed", "skipped",
	// "fallback-local", "alternate" (the prefill ran on x-pdgate-prefiller-alternate-host-port,
	// not on the pod the EPP charged). The EPP's ledger releases the prefill charge's active
	// part when it sees the response headers (the prefill leg is over by then in every engine
	// dialect) unless the sidecar's HeaderPrefillRelease callback released it earlier.
	HeaderPrefillOutcome = "x-pdgate-prefill-outcome"
	// HeaderPrefillDurationMS is the prefill leg's duration in milliseconds, set by the sidecar.
	HeaderPrefillDurationMS = "x-pdgate-prefill-ms"
)

// Values of HeaderPrefillOutcome.
const (
	PrefillOK      = "ok"
	PrefillFailed  = "failed"
	PrefillSkipped = "skipped"
	// PrefillFallbackLocal: the prefill leg failed and the decode pod prefilled the prompt.
	PrefillFallbackLocal = "fallback-local"
	// PrefillAlternate: the prefill ran on the EPP's alternate prefill pod after the named one
	// failed; the named pod holds no KV for the request.
	PrefillAlternate = "alternate"
)

// PrefillOutcome is a response's HeaderPrefillOutcome, trimmed and lower-cased; "" where no
// sidecar set it.
func PrefillOutcome(h map[string]string) string {
	return strings.ToLower(strings.TrimSpace(HeaderValue(h, HeaderPrefillOutcome)))
}

// HeaderValue looks a header up in a request's header map exactly, then in any letter case:
// Envoy lower-cases names, other gateways and tests may not.
func HeaderValue(h map[string]string, name string) string {
	if v, ok := h[name]; ok {
		return v
	}
	for k, v := range h {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return ""
}
