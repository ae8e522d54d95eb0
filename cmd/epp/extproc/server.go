// Package extproc wraps GIE's ext_proc StreamingServer with the request-path guarantees pdgate
// needs and GIE cannot give from inside a plugin:
//
//   - client-supplied routing headers (protocol.RoutingHeaders) and internal headers
//     (protocol.InternalHeaderPrefix) are dropped before GIE sees the request;
//   - every routing header a plugin did not set is added to RemoveHeaders, so a spoofed value
//     never reaches the decode pod even through a gateway that merges header mutations;
//   - a plugin's request for an immediate answer (protocol.HeaderImmediateStatus) becomes an
//     ImmediateResponse (the 412 conditional-decode gate, the 429 rate cap);
//   - a protocol.StatusError marker in a GIE ImmediateResponse body rewrites its status;
//   - request bodies over the configured limit are answered with 413;
//   - decision traces are returned in x-pdgate-decision when asked for and allowed.
package extproc

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typePb "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/pdgate/pdgate/plugins/decisiontrace"
	"github.com/pdgate/pdgate/plugins/protocol"
)

// requestIDHeader is the header GIE keys per-request plugin state by.
const requestIDHeader = "x-request-id"

// Processor is what GIE's *handlers.StreamingServer offers.
type Processor interface {
	Process(srv extProcPb.ExternalProcessor_ProcessServer) error
}

// TraceSource hands over the decision trace recorded for a request, once.
type TraceSource interface {
	Take(requestID string) *decisiontrace.Trace
}

// Options configure the wrapper.
type Options struct {
	// MaxRequestBodyBytes answers 413 when a request body grows beyond it; 0 disables the check.
	MaxRequestBodyBytes int64
	// AllowTrace lets clients ask for x-pdgate-decision with x-pdgate-trace: 1.
	AllowTrace bool
	// Traces supplies recorded traces; nil disables trace output.
	Traces TraceSource
}

// Server is an ext_proc server that wraps a GIE StreamingServer.
type Server struct {
	extProcPb.UnimplementedExternalProcessorServer
	inner Processor
	opts  Options
}

// New wraps inner.
func New(inner Processor, opts Options) *Server {
	return &Server{inner: inner, opts: opts}
}

// Process serves one ext_proc stream (one HTTP request).
func (s *Server) Process(srv extProcPb.ExternalProcessor_ProcessServer) error {
	st := &stream{ExternalProcessor_ProcessServer: srv, s: s, logger: log.FromContext(srv.Context())}
	defer st.dropTrace()
	return s.inner.Process(st)
}

// stream intercepts the frames between the gateway and GIE's server. GIE's Process loop calls
// Recv and Send from one goroutine, so the state needs no locking.
type stream struct {
	extProcPb.ExternalProcessor_ProcessServer
	s      *Server
	logger logr.Logger

	requestID      string
	traceRequested bool
	trace          *decisiontrace.Trace
	traceTaken     bool
	bodyBytes      int64
	// finished is set once this wrapper answered the request itself; GIE's remaining request
	// frames are swallowed and its next Recv ends the stream.
	finished bool
}

func (st *stream) Recv() (*extProcPb.ProcessingRequest, error) {
	if st.finished {
		return nil, io.EOF
	}
	req, err := st.ExternalProcessor_ProcessServer.Recv()
	if err != nil {
		return req, err
	}
	switch v := req.Request.(type) {
	case *extProcPb.ProcessingRequest_RequestHeaders:
		if err := st.onRequestHeaders(v); err != nil {
			return nil, err
		}
		if st.finished {
			return nil, io.EOF
		}
	case *extProcPb.ProcessingRequest_RequestBody:
		st.bodyBytes += int64(len(v.RequestBody.GetBody()))
		if max := st.s.opts.MaxRequestBodyBytes; max > 0 && st.bodyBytes > max {
			if err := st.reject413(); err != nil {
				return nil, err
			}
			return nil, io.EOF
		}
	}
	return req, nil
}

func (st *stream) onRequestHeaders(v *extProcPb.ProcessingRequest_RequestHeaders) error {
	hm := v.RequestHeaders.GetHeaders()
	if hm == nil {
		return nil
	}
	kept := hm.Headers[:0]
	for _, h := range hm.Headers {
		key := strings.ToLower(h.GetKey())
		if isRoutingHeader(key) || strings.HasPrefix(key, protocol.InternalHeaderPrefix) {
			st.logger.V(1).Info("Dropped client-supplied pdgate header", "header", key)
			continue
		}
		val := headerValue(h)
		switch key {
		case requestIDHeader:
			st.requestID = val
		case protocol.HeaderTrace:
			st.traceRequested = traceValue(val)
		case "content-length":
			if n, err := strconv.ParseInt(strings.TrimSpace(val), 10, 64); err == nil {
				if max := st.s.opts.MaxRequestBodyBytes; max > 0 && n > max {
					st.bodyBytes = n
					return st.reject413()
				}
			}
		}
		kept = append(kept, h)
	}
	hm.Headers = kept
	if st.requestID == "" {
		// GIE would generate one itself, but the trace hand-over needs to know it.
		st.requestID = uuid.NewString()
		hm.Headers = append(hm.Headers, &configPb.HeaderValue{Key: requestIDHeader, RawValue: []byte(st.requestID)})
	}
	return nil
}

func (st *stream) reject413() error {
	bodyRejected.Inc()
	st.finished = true
	msg := fmt.Sprintf("request body exceeds the EPP limit of %d bytes (--max-request-body-bytes)", st.s.opts.MaxRequestBodyBytes)
	st.logger.Info("Rejected request body", "limit", st.s.opts.MaxRequestBodyBytes, "seen", st.bodyBytes)
	return st.ExternalProcessor_ProcessServer.Send(immediate(413, protocol.ErrorBody(413, "invalid_request_error", msg),
		[]*configPb.HeaderValueOption{setHeader("content-type", "application/json")}))
}

func (st *stream) Send(resp *extProcPb.ProcessingResponse) error {
	if st.finished {
		return nil // the request was answered already: swallow GIE's remaining frames
	}
	switch v := resp.Response.(type) {
	case *extProcPb.ProcessingResponse_RequestHeaders:
		st.takeTrace()
		if ir := st.fixRequestHeaders(v.RequestHeaders); ir != nil {
			st.finished = true
			immediateAnswers.WithLabelValues(strconv.Itoa(int(ir.GetImmediateResponse().GetStatus().GetCode()))).Inc()
			return st.ExternalProcessor_ProcessServer.Send(ir)
		}
	case *extProcPb.ProcessingResponse_ImmediateResponse:
		st.takeTrace()
		st.fixImmediate(v.ImmediateResponse)
	case *extProcPb.ProcessingResponse_ResponseHeaders:
		st.fixResponseHeaders(v.ResponseHeaders)
	}
	return st.ExternalProcessor_ProcessServer.Send(resp)
}

// fixRequestHeaders enforces the routing-header contract on GIE's header mutation and returns
// an ImmediateResponse when a plugin asked for one.
func (st *stream) fixRequestHeaders(hr *extProcPb.HeadersResponse) *extProcPb.ProcessingResponse {
	if hr.Response == nil {
		hr.Response = &extProcPb.CommonResponse{}
	}
	if hr.Response.HeaderMutation == nil {
		hr.Response.HeaderMutation = &extProcPb.HeaderMutation{}
	}
	mut := hr.Response.HeaderMutation
	var set uint64 // bit i: protocol.RoutingHeaders[i] was set by a plugin
	var immStatus, immBody, immHeaders string
	kept := mut.SetHeaders[:0]
	for _, o := range mut.SetHeaders {
		key := strings.ToLower(o.GetHeader().GetKey())
		if strings.HasPrefix(key, protocol.InternalHeaderPrefix) {
			switch key {
			case protocol.HeaderImmediateStatus:
				immStatus = headerValue(o.GetHeader())
			case protocol.HeaderImmediateBody:
				immBody = headerValue(o.GetHeader())
			case protocol.HeaderImmediateHeaders:
				immHeaders = headerValue(o.GetHeader())
			}
			continue
		}
		if i := routingIndex(key); i >= 0 {
			if headerValue(o.GetHeader()) == "" {
				continue // an empty value means "clear": leave it to RemoveHeaders
			}
			set |= 1 << uint(i)
		}
		kept = append(kept, o)
	}
	mut.SetHeaders = kept
	for i, name := range protocol.RoutingHeaders {
		if set&(1<<uint(i)) == 0 && !contains(mut.RemoveHeaders, name) {
			mut.RemoveHeaders = append(mut.RemoveHeaders, name)
		}
	}
	if immStatus == "" {
		return nil
	}
	code, err := strconv.Atoi(strings.TrimSpace(immStatus))
	if err != nil || code < 200 || code > 599 {
		st.logger.Error(err, "Plugin asked for an invalid immediate status; answering 500", "status", immStatus)
		code = 500
		immBody = string(protocol.ErrorBody(500, "internal_error", "invalid immediate status from an EPP plugin"))
		immHeaders = ""
	}
	headers := parseHeaderList(immHeaders)
	if immBody != "" && !hasHeader(headers, "content-type") {
		ct := "text/plain"
		if strings.HasPrefix(strings.TrimSpace(immBody), "{") {
			ct = "application/json"
		}
		headers = append(headers, setHeader("content-type", ct))
	}
	headers = st.appendDecision(headers)
	st.logger.V(1).Info("Answering request immediately on a plugin's request", "status", code)
	return immediate(code, []byte(immBody), headers)
}

// fixImmediate rewrites the status of GIE's error answers that carry a pdgate status marker.
func (st *stream) fixImmediate(ir *extProcPb.ImmediateResponse) {
	if code, body, ok := protocol.StatusErrorBody(string(ir.Body)); ok {
		statusRewrites.WithLabelValues(strconv.Itoa(code)).Inc()
		ir.Status = &typePb.HttpStatus{Code: typePb.StatusCode(code)}
		ir.Body = []byte(body)
	}
	if ir.Headers == nil {
		ir.Headers = &extProcPb.HeaderMutation{}
	}
	ir.Headers.SetHeaders = st.appendDecision(ir.Headers.SetHeaders)
}

func (st *stream) fixResponseHeaders(hr *extProcPb.HeadersResponse) {
	if hr.Response == nil {
		hr.Response = &extProcPb.CommonResponse{}
	}
	if hr.Response.HeaderMutation == nil {
		hr.Response.HeaderMutation = &extProcPb.HeaderMutation{}
	}
	mut := hr.Response.HeaderMutation
	kept := mut.SetHeaders[:0]
	for _, o := range mut.SetHeaders {
		if !strings.HasPrefix(strings.ToLower(o.GetHeader().GetKey()), protocol.InternalHeaderPrefix) {
			kept = append(kept, o)
		}
	}
	mut.SetHeaders = st.appendDecision(kept)
}

// takeTrace collects the request's trace once scheduling is over and logs it.
func (st *stream) takeTrace() {
	if st.traceTaken || st.s.opts.Traces == nil || st.requestID == "" {
		return
	}
	st.traceTaken = true
	st.trace = st.s.opts.Traces.Take(st.requestID)
	if st.trace == nil {
		return
	}
	level := 2
	if st.returnTrace() {
		level = 1
	}
	if l := st.logger.V(level); l.Enabled() {
		b, err := json.Marshal(st.trace)
		if err != nil {
			l.Info("Decision trace", requestIDHeader, st.requestID, "trace", st.trace.Compact())
			return
		}
		// The request id keys the trace to the request (pdgate lab traces prints it).
		l.Info("Decision trace", requestIDHeader, st.requestID, "trace", json.RawMessage(b))
	}
}

func (st *stream) dropTrace() {
	if !st.traceTaken && st.s.opts.Traces != nil && st.requestID != "" {
		st.s.opts.Traces.Take(st.requestID)
	}
}

func (st *stream) returnTrace() bool { return st.s.opts.AllowTrace && st.traceRequested }

func (st *stream) appendDecision(h []*configPb.HeaderValueOption) []*configPb.HeaderValueOption {
	if st.trace == nil || !st.returnTrace() {
		return h
	}
	return append(h, setHeader(protocol.HeaderDecision, st.trace.Compact()))
}

func immediate(code int, body []byte, headers []*configPb.HeaderValueOption) *extProcPb.ProcessingResponse {
	return &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extProcPb.ImmediateResponse{
			Status:  &typePb.HttpStatus{Code: typePb.StatusCode(code)},
			Body:    body,
			Headers: &extProcPb.HeaderMutation{SetHeaders: headers},
		},
	}}
}

func setHeader(k, v string) *configPb.HeaderValueOption {
	return &configPb.HeaderValueOption{Header: &configPb.HeaderValue{Key: k, RawValue: []byte(v)}}
}

// parseHeaderList parses protocol.HeaderImmediateHeaders: "name=value,name2=value2". Items
// without a name are skipped; values may contain '='.
func parseHeaderList(s string) []*configPb.HeaderValueOption {
	var out []*configPb.HeaderValueOption
	for _, item := range strings.Split(s, ",") {
		name, value, ok := strings.Cut(item, "=")
		name = strings.ToLower(strings.TrimSpace(name))
		if !ok || name == "" || strings.HasPrefix(name, protocol.InternalHeaderPrefix) || strings.ContainsAny(name, " \t:") {
			continue
		}
		out = append(out, setHeader(name, strings.TrimSpace(value)))
	}
	return out
}

func hasHeader(h []*configPb.HeaderValueOption, name string) bool {
	for _, o := range h {
		if strings.EqualFold(o.GetHeader().GetKey(), name) {
			return true
		}
	}
	return false
}

func headerValue(h *configPb.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

func traceValue(v string) bool {
	v = strings.TrimSpace(v)
	return v == "1" || strings.EqualFold(v, "true")
}

func isRoutingHeader(key string) bool { return routingIndex(key) >= 0 }

func routingIndex(key string) int {
	for i, h := range protocol.RoutingHeaders {
		if key == h {
			return i
		}
	}
	return -1
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if strings.EqualFold(v, s) {
			return true
		}
	}
	return false
}
