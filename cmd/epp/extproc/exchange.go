package extproc

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterPb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"github.com/google/uuid"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"
	"sigs.k8s.io/controller-runtime/pkg/log"
	envoy "sigs.k8s.io/gateway-api-inference-extension/pkg/common/envoy"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"

	"github.com/pdgate/pdgate/plugins/framework/contract"
	"github.com/pdgate/pdgate/plugins/framework/decisiontrace"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// exchange is one ext_proc stream: the request, the decision and the response. Process calls
// it from one goroutine, so it needs no locking.
type exchange struct {
	s      *Server
	srv    extProcPb.ExternalProcessor_ProcessServer
	logger logr.Logger

	requestBodyMode  filterPb.ProcessingMode_BodySendMode
	responseBodyMode filterPb.ProcessingMode_BodySendMode
	metadata         map[string]any

	// Request. headers is the map plugins see (LLMRequest.Headers); sent remembers what the
	// client sent, so only what plugins changed goes back as a header mutation.
	headers        map[string]string
	sent           map[string]string
	requestID      string
	generatedID    bool
	traceRequested bool
	fairnessID     string
	objectiveKey   string
	rewriteModel   string // x-gateway-model-name-rewrite
	received       time.Time
	contentLength  int64
	chunks         [][]byte // request body frames until the last one arrives
	bodyLen        int
	body           []byte
	bodyRewritten  bool // the model was rewritten: the upstream body is not the received one

	// Decision.
	incomingModel string
	targetModel   string
	priority      int
	request       *fwksched.LLMRequest
	result        *fwksched.SchedulingResult
	targetPod     *fwkdl.EndpointMetadata
	trace         *decisiontrace.Trace
	takeTrace     func() *decisiontrace.Trace
	running       bool
	errCode       string // GIE's error code for inference_objective_request_error_total
	answered      bool   // an ImmediateResponse ended the exchange
	tl            timeline

	// Response.
	respHeaders  map[string]string
	respSent     map[string]string
	streaming    bool
	respBody     []byte
	respSize     int
	usage        fwkrc.Usage
	respComplete bool
	completedAt  time.Time
	dynamic      *structpb.Struct // from ResponseBody plugins, on the last body frame
}

func newExchange(s *Server, srv extProcPb.ExternalProcessor_ProcessServer, logger logr.Logger) *exchange {
	headers := map[string]string{}
	return &exchange{s: s, srv: srv, logger: logger, headers: headers, tl: timeline{carrier: traceCarrier{headers: headers}}}
}

// handle processes one message from the gateway.
func (x *exchange) handle(ctx context.Context, msg *extProcPb.ProcessingRequest) error {
	if pc := msg.GetProtocolConfig(); pc != nil {
		x.requestBodyMode, x.responseBodyMode = pc.GetRequestBodyMode(), pc.GetResponseBodyMode()
	}
	// As GIE: the metadata of the latest message is the request's metadata.
	x.metadata = envoy.ExtractMetadataValues(msg)
	switch v := msg.Request.(type) {
	case *extProcPb.ProcessingRequest_RequestHeaders:
		return x.onRequestHeaders(ctx, v.RequestHeaders)
	case *extProcPb.ProcessingRequest_RequestBody:
		return x.onRequestBody(ctx, v.RequestBody)
	case *extProcPb.ProcessingRequest_RequestTrailers:
		return nil // GIE sends nothing for request trailers either
	case *extProcPb.ProcessingRequest_ResponseHeaders:
		return x.onResponseHeaders(ctx, v.ResponseHeaders)
	case *extProcPb.ProcessingRequest_ResponseBody:
		return x.onResponseBody(ctx, v.ResponseBody)
	case *extProcPb.ProcessingRequest_ResponseTrailers:
		return x.onResponseTrailers(ctx)
	}
	return nil
}

func (x *exchange) onRequestHeaders(ctx context.Context, h *extProcPb.HttpHeaders) error {
	x.received = time.Now()
	for _, hv := range h.GetHeaders().GetHeaders() {
		key := hv.GetKey()
		lower := strings.ToLower(key)
		if isRoutingHeader(lower) {
			// Never seen by a plugin, removed upstream unless a plugin sets it.
			x.logger.V(logutil.DEBUG).Info("Dropped client-supplied routing header", "header", lower)
			continue
		}
		val := envoy.GetHeaderValue(hv)
		x.headers[key] = val
		if x.tl.carrier.read(key, lower, val) {
			continue
		}
		switch lower {
		case reqcommon.RequestIdHeaderKey:
			x.requestID = val
		case protocol.HeaderTrace:
			x.traceRequested = traceValue(val)
		case metadata.FlowFairnessIDKey:
			x.fairnessID = val
		case metadata.ObjectiveKey:
			x.objectiveKey = val
		case metadata.ModelNameRewriteKey:
			x.rewriteModel = val
		case "content-length":
			x.contentLength, _ = strconv.ParseInt(strings.TrimSpace(val), 10, 64)
		}
	}
	if x.requestID == "" {
		x.requestID = uuid.NewString()
		x.generatedID = true
		x.headers[reqcommon.RequestIdHeaderKey] = x.requestID
	}
	if x.fairnessID == "" {
		x.fairnessID = metadata.DefaultFairnessID
	}
	x.logger = withRequestValues(x.logger, reqcommon.RequestIdHeaderKey, x.requestID)
	x.startRequestSpan(ctx)
	x.sent = make(map[string]string, len(x.headers))
	for k, v := range x.headers {
		x.sent[k] = v
	}
	if x.generatedID {
		delete(x.sent, reqcommon.RequestIdHeaderKey) // upstream must learn it
	}
	if max := x.s.opts.MaxRequestBodyBytes; max > 0 && x.contentLength > max {
		return x.answer(ctx, bodyTooLarge(max))
	}
	if h.GetEndOfStream() {
		return x.headersOnly()
	}
	if x.bufferedRequest() {
		// Envoy waits for this answer before it sends the buffered body; the routing decision
		// travels with the body response.
		return x.send(&extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_RequestHeaders{
			RequestHeaders: &extProcPb.HeadersResponse{}}})
	}
	return nil
}

// headersOnly routes a request without a body to a random endpoint, as GIE does: there is
// nothing to schedule on.
func (x *exchange) headersOnly() error {
	eps := x.s.cfg.Datastore.PodList(func(fwkdl.Endpoint) bool { return true })
	if len(eps) == 0 {
		return x.fail(errcommon.Error{Code: errcommon.Internal, Msg: "no pods available in datastore"})
	}
	md := eps[int(time.Now().UnixNano()%int64(len(eps)))].GetMetadata()
	target := md.GetIPAddress() + ":" + md.GetPort()
	common, dyn := x.routing(target, 0, x.headerMutations())
	return x.send(&extProcPb.ProcessingResponse{
		Response:        &extProcPb.ProcessingResponse_RequestHeaders{RequestHeaders: &extProcPb.HeadersResponse{Response: common}},
		DynamicMetadata: dyn,
	})
}

func (x *exchange) onRequestBody(ctx context.Context, b *extProcPb.HttpBody) error {
	// The frames are kept as they came (the gRPC messages own their bytes) and joined once, at
	// the end, into a buffer of the exact size: one copy, none for a one-frame body.
	chunk := b.GetBody()
	x.chunks = append(x.chunks, chunk)
	x.bodyLen += len(chunk)
	if max := x.s.opts.MaxRequestBodyBytes; max > 0 && int64(x.bodyLen) > max {
		return x.answer(ctx, bodyTooLarge(max))
	}
	if !b.GetEndOfStream() {
		return nil
	}
	x.joinBody()
	return x.decide(ctx)
}

func (x *exchange) joinBody() {
	if len(x.chunks) == 1 {
		x.body = x.chunks[0]
	} else {
		x.body = bytes.Join(x.chunks, nil) // one buffer of the exact size, not zeroed first
	}
	x.chunks = nil
}

func bodyTooLarge(max int64) *contract.Answer {
	return contract.NewAnswer(413, contract.CauseBodyTooLarge, "invalid_request_error",
		fmt.Sprintf("request body exceeds the EPP limit of %d bytes (--max-request-body-bytes)", max))
}

// send writes one response to the gateway.
func (x *exchange) send(resp *extProcPb.ProcessingResponse) error {
	if err := x.srv.Send(resp); err != nil {
		x.logger.Error(err, "Send failed")
		return status.Errorf(codes.Unknown, "failed to send response back to Envoy: %v", err)
	}
	return nil
}

// finish runs when the stream ends, however it ends: metrics, and the end-of-stream hooks of a
// request that was scheduled but never completed (errors, disconnects, early answers), so every
// ledger charge is released.
func (x *exchange) finish() {
	defer x.endRequestSpan()
	if x.errCode != "" {
		metrics.RecordRequestErrCounter(x.incomingModel, x.targetModel, x.errCode)
	}
	if x.running {
		metrics.DecRunningRequests(x.incomingModel)
	}
	if x.targetPod != nil && !x.respComplete {
		ctx := log.IntoContext(context.Background(), x.logger)
		x.runResponseBody(ctx, true)
	}
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

func setHeader(k, v string) *configPb.HeaderValueOption {
	return &configPb.HeaderValueOption{Header: &configPb.HeaderValue{Key: k, RawValue: []byte(v)}}
}
