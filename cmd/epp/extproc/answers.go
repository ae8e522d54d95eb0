package extproc

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typePb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// answer ends the exchange with a plugin's (or the path's own) early answer.
func (x *exchange) answer(_ context.Context, a *contract.Answer) error {
	x.collectTrace()
	x.answered = true
	x.errCode = errorCodeOf(a.Status)
	immediateAnswers.WithLabelValues(strconv.Itoa(a.Status), string(a.Cause)).Inc()
	if a.Cause == contract.CauseBodyTooLarge {
		bodyRejected.Inc()
	}
	x.logger.V(logutil.DEBUG).Info("Answering the request in the EPP", "status", a.Status, "cause", a.Cause, "reason", a.Message)
	hs := a.ResponseHeaders()
	headers := make([]*configPb.HeaderValueOption, 0, len(hs)+1)
	for _, h := range hs {
		headers = append(headers, setHeader(h.Name, h.Value))
	}
	return x.send(&extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extProcPb.ImmediateResponse{
			Status:  &typePb.HttpStatus{Code: typePb.StatusCode(a.Status)},
			Body:    a.Body,
			Headers: &extProcPb.HeaderMutation{SetHeaders: x.appendDecision(headers)},
		},
	}})
}

// fail ends the exchange with one of GIE's errors: GIE's status mapping (BuildErrResponse's
// 400/401/403/404/429/500/503), answered with an OpenAI JSON error body (errorBody) instead of
// GIE's text "inference error: <Code> - <msg>", as llm-d's EPP does since v0.11; an error GIE
// cannot map still ends the stream with a gRPC error, and Envoy applies the pool's failure mode.
func (x *exchange) fail(err error) error {
	x.collectTrace()
	x.answered = true
	x.errCode = errcommon.CanonicalCode(err)
	x.logger.Error(err, "Failed to process request")
	resp, gerr := errcommon.BuildErrResponse(err)
	if gerr != nil {
		return gerr
	}
	if ir := resp.GetImmediateResponse(); ir != nil {
		status := int(ir.GetStatus().GetCode())
		immediateAnswers.WithLabelValues(strconv.Itoa(status), "gie_"+x.errCode).Inc()
		ir.Body = errorBody(status, err)
		ir.Headers = &extProcPb.HeaderMutation{SetHeaders: x.appendDecision([]*configPb.HeaderValueOption{
			setHeader("content-type", protocol.ContentTypeJSON), setHeader(protocol.HeaderErrorCause, "gie_"+x.errCode)})}
	}
	return x.send(resp)
}

// errorBody is the JSON body of a GIE error: GIE's message without its "inference error:
// <Code> - " prefix, the type llm-d gives the code (protocol.TypeForStatus), the status as code.
func errorBody(status int, err error) []byte {
	msg := err.Error()
	var e errcommon.Error
	if errors.As(err, &e) {
		msg = e.Msg
	}
	return protocol.ErrorBody(status, "", msg)
}

// errorCodeOf is GIE's error code for an HTTP status (the error_code label of
// inference_objective_request_error_total).
func errorCodeOf(status int) string {
	switch status {
	case http.StatusBadRequest, http.StatusRequestEntityTooLarge:
		return errcommon.BadRequest
	case http.StatusUnauthorized:
		return errcommon.Unauthorized
	case http.StatusForbidden:
		return errcommon.Forbidden
	case http.StatusNotFound:
		return errcommon.NotFound
	case http.StatusTooManyRequests:
		return errcommon.ResourceExhausted
	case http.StatusServiceUnavailable:
		return errcommon.ServiceUnavailable
	case http.StatusPreconditionFailed:
		return "PreconditionFailed" // llm-d's code for the conditional-decode 412
	}
	return errcommon.Internal
}

// collectTrace takes the request's decision trace once scheduling is over and logs it.
func (x *exchange) collectTrace() {
	if x.takeTrace == nil || x.trace != nil {
		return
	}
	x.trace = x.takeTrace()
	x.takeTrace = nil
	if x.trace == nil {
		return
	}
	level := x.s.opts.TraceLogLevel
	if x.returnTrace() {
		level--
	}
	if l := x.logger.V(level); l.Enabled() {
		b, err := json.Marshal(x.trace)
		if err != nil {
			l.Info("Decision trace", "trace", x.trace.Compact())
			return
		}
		// The request id keys the trace to the request (pdgate lab traces prints it).
		l.Info("Decision trace", "trace", json.RawMessage(b))
	}
}

func (x *exchange) returnTrace() bool { return x.s.opts.AllowTrace && x.traceRequested }

func (x *exchange) appendDecision(h []*configPb.HeaderValueOption) []*configPb.HeaderValueOption {
	if x.trace == nil || !x.returnTrace() {
		return h
	}
	return append(h, setHeader(protocol.HeaderDecision, x.trace.Compact()))
}
