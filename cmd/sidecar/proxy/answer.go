package proxy

import (
	"net/http"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// reporter counts where a request's prefill ended up and writes the failure answers every
// stage shares. It is a leaf: it calls no stage, so any stage may use it.
type reporter struct {
	m      *Metrics
	engine string
}

// diverted counts a request whose prefill did not run where the EPP said (outcome failed,
// fallback-local, alternate or skipped; reason a failure class or a named cause). Requests
// the EPP sent without a prefill target are not counted: nothing was diverted.
func (rp reporter) diverted(rq *request, outcome, reason string) {
	if !rq.prefillAsked {
		return
	}
	rp.m.PrefillDiverted.WithLabelValues(rp.engine, outcome, reason).Inc()
}

// refusePrefill answers a request whose prefill leg is refused before it is sent, with the
// failed outcome, x-error-pd-prefill and the diverted-prefill count.
func (rp reporter) refusePrefill(w http.ResponseWriter, rq *request, code int, msg, reason string) {
	rp.diverted(rq, outcomeFailed, reason)
	rp.m.aibrixFailure(aibrixPrefillFailure, code)
	w.Header().Set(protocol.HeaderPrefillOutcome, outcomeFailed)
	w.Header().Set(headerErrorCause, reason)
	writeError(w, code, msg, protocol.HeaderErrorPrefill)
}

// prefillFailure answers the client for a failed prefill leg: the prefiller's own status for
// HTTP failures, 503 for every other class.
func (rp reporter) prefillFailure(w http.ResponseWriter, rq *request, lerr *legError) {
	code := http.StatusServiceUnavailable
	if lerr.class == classHTTP && lerr.status >= 400 && lerr.status <= 599 {
		code = lerr.status
	}
	rp.diverted(rq, outcomeFailed, lerr.class)
	rp.m.aibrixFailure(aibrixPrefillFailure, code)
	w.Header().Set(protocol.HeaderPrefillOutcome, outcomeFailed)
	w.Header().Set(headerErrorCause, lerr.class)
	writeError(w, code, "prefill request failed ("+lerr.class+"): "+truncate(lerr.Error(), 256), protocol.HeaderErrorPrefill)
}

// gateFailure answers a decode whose concurrent prefill leg failed before the decode's answer
// could start.
func (rp reporter) gateFailure(w http.ResponseWriter, rq *request, g *gate) {
	if lerr := g.failure(); lerr != nil {
		rp.prefillFailure(w, rq, lerr)
		return
	}
	rp.diverted(rq, outcomeFailed, "unknown")
	rp.m.aibrixFailure(aibrixPrefillFailure, http.StatusServiceUnavailable)
	w.Header().Set(protocol.HeaderPrefillOutcome, outcomeFailed)
	w.Header().Set(headerErrorCause, "unknown")
	writeError(w, http.StatusServiceUnavailable, "prefill leg failed", protocol.HeaderErrorPrefill)
}

// writeError writes an OpenAI-shaped error; flags are header names set to "true".
func writeError(w http.ResponseWriter, code int, msg string, flags ...string) {
	for _, f := range flags {
		w.Header().Set(f, "true")
	}
	protocol.WriteError(w, code, errorType(code), msg)
}

// errorTypes are the OpenAI error types of the statuses the sidecar answers with.
var errorTypes = map[int]string{
	http.StatusBadRequest:            "BadRequestError",
	http.StatusForbidden:             "PermissionDeniedError",
	http.StatusRequestEntityTooLarge: "RequestTooLargeError",
	http.StatusGatewayTimeout:        "GatewayTimeoutError",
	http.StatusServiceUnavailable:    "ServiceUnavailableError",
}

func errorType(code int) string {
	if t, ok := errorTypes[code]; ok {
		return t
	}
	if code >= 500 {
		return "InternalServerError"
	}
	return "InvalidRequestError"
}
