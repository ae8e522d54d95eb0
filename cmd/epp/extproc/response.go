package extproc

import (
	"bytes"
	"context"
	"strings"
	"time"

	configPb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterPb "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	envoy "sigs.k8s.io/gateway-api-inference-extension/pkg/common/envoy"
	errcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/error"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	fwkrc "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/requestcontrol"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metrics"
	requtil "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/util/request"
)

// onResponseHeaders runs the ResponseHeader plugins and returns what they added or changed.
// Unlike GIE it does not echo every response header back, nor add its debugging header
// x-went-into-resp-headers: clients get the engine's headers plus the plugins' changes.
func (x *exchange) onResponseHeaders(ctx context.Context, h *extProcPb.HttpHeaders) error {
	x.respHeaders = make(map[string]string, len(h.GetHeaders().GetHeaders()))
	for _, hv := range h.GetHeaders().GetHeaders() {
		key, val := hv.GetKey(), envoy.GetHeaderValue(hv)
		x.respHeaders[key] = val
		switch strings.ToLower(key) {
		case ":status", "status":
			// GIE checks only "status"; Envoy sends ":status".
			if val != "200" {
				x.errCode = errcommon.ModelServerError
			}
		case "content-type":
			if strings.Contains(val, "text/event-stream") {
				x.streaming = true
			}
		}
	}
	x.respSent = make(map[string]string, len(x.respHeaders))
	for k, v := range x.respHeaders {
		x.respSent[k] = v
	}
	resp := &fwkrc.Response{RequestId: x.headers[reqcommon.RequestIdHeaderKey], Headers: x.respHeaders, ReqMetadata: x.metadata}
	x.s.director.ResponseHeader(ctx, x.request, resp, x.targetPod)
	if x.returnTrace() {
		x.respHeaders[headerServerTiming] = x.serverTiming(x.respHeader(headerServerTiming))
	}
	if v, ok := x.flowQueueDuration(); ok {
		x.respHeaders[HeaderFlowQueueDuration] = v
	}
	var set []*configPb.HeaderValueOption
	for k, v := range x.respHeaders {
		if requtil.IsSystemOwnedHeader(k) {
			continue
		}
		if old, ok := x.respSent[k]; !ok || old != v {
			set = append(set, setHeader(k, v))
		}
	}
	return x.send(&extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseHeaders{
		ResponseHeaders: &extProcPb.HeadersResponse{Response: &extProcPb.CommonResponse{
			HeaderMutation: &extProcPb.HeaderMutation{SetHeaders: x.appendDecision(set)},
		}},
	}})
}

// onResponseBody handles one response body frame. Streaming responses are handed to the
// ResponseBody plugins chunk by chunk and echoed at once; non-streaming ones are echoed at once
// too unless the model name must be rewritten back (then GIE's buffering applies), and the
// plugins see the whole body at its end.
func (x *exchange) onResponseBody(ctx context.Context, b *extProcPb.HttpBody) error {
	chunk, eos := b.GetBody(), b.GetEndOfStream()
	if x.bufferedResponse() {
		x.respBody = chunk
		x.complete(ctx, chunk)
		common := &extProcPb.CommonResponse{}
		if out := x.rewriteModelBack(chunk); !bytes.Equal(out, chunk) {
			common.BodyMutation = &extProcPb.BodyMutation{Mutation: &extProcPb.BodyMutation_Body{Body: out}}
		}
		return x.send(&extProcPb.ProcessingResponse{
			Response:        &extProcPb.ProcessingResponse_ResponseBody{ResponseBody: &extProcPb.BodyResponse{Response: common}},
			DynamicMetadata: x.dynamic,
		})
	}
	if x.streaming || (x.request != nil && x.request.Body != nil && x.request.Body.Stream) {
		if eos {
			x.respComplete, x.completedAt = true, time.Now()
		}
		x.bodyChunk(ctx, chunk, eos)
		return x.sendResponseBody(x.rewriteModelBack(chunk), eos)
	}
	x.respBody = append(x.respBody, chunk...)
	if !x.needsModelRewrite() && !eos {
		return x.sendResponseBody(chunk, false)
	}
	if !eos {
		return nil
	}
	if x.needsModelRewrite() {
		x.complete(ctx, x.respBody)
		return x.sendChunked(x.rewriteModelBack(x.respBody), true)
	}
	x.complete(ctx, x.respBody)
	return x.sendResponseBody(chunk, true)
}

// onResponseTrailers ends a response that had no end-of-stream body frame (gRPC).
func (x *exchange) onResponseTrailers(ctx context.Context) error {
	if !x.respComplete && !x.streaming {
		x.complete(ctx, x.respBody)
		if x.needsModelRewrite() {
			if err := x.sendChunked(x.rewriteModelBack(x.respBody), false); err != nil {
				return err
			}
		}
	} else if !x.respComplete {
		x.complete(ctx, nil)
	}
	return x.send(&extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseTrailers{
		ResponseTrailers: &extProcPb.TrailersResponse{}}})
}

// complete hands a whole response to the ResponseBody plugins once.
func (x *exchange) complete(ctx context.Context, body []byte) {
	if x.respComplete {
		return
	}
	x.respComplete, x.completedAt = true, time.Now()
	x.bodyChunk(ctx, body, true)
}

// bodyChunk is GIE's HandleResponseBody: usage accounting, response metrics, then the
// ResponseBody plugins.
func (x *exchange) bodyChunk(ctx context.Context, chunk []byte, eos bool) {
	x.respSize += len(chunk)
	if parsed, err := x.s.cfg.Parser.ParseResponse(ctx, chunk, x.respHeaders, eos); err != nil {
		x.logger.Error(err, "parsing response")
	} else if parsed != nil && parsed.Usage != nil {
		x.usage = *parsed.Usage
		metrics.RecordInputTokens(x.incomingModel, x.targetModel, x.usage.PromptTokens)
		metrics.RecordOutputTokens(x.incomingModel, x.targetModel, x.usage.CompletionTokens)
		if x.usage.PromptTokenDetails != nil {
			metrics.RecordPromptCachedTokens(x.incomingModel, x.targetModel, x.usage.PromptTokenDetails.CachedTokens)
		}
	}
	if eos {
		metrics.RecordNormalizedTimePerOutputToken(ctx, x.incomingModel, x.targetModel, x.received, x.completedAt, x.usage.CompletionTokens)
		metrics.RecordRequestLatencies(ctx, x.incomingModel, x.targetModel, x.received, x.completedAt)
		metrics.RecordResponseSizes(x.incomingModel, x.targetModel, x.respSize)
	}
	x.runResponseBody(ctx, eos)
}

func (x *exchange) runResponseBody(ctx context.Context, eos bool) {
	resp := &fwkrc.Response{RequestId: x.headers[reqcommon.RequestIdHeaderKey], Headers: x.respHeaders, EndOfStream: eos, Usage: x.usage}
	x.s.director.ResponseBody(ctx, x.request, resp, x.targetPod)
	x.dynamic = resp.DynamicMetadata
}

func (x *exchange) needsModelRewrite() bool {
	return x.targetModel != "" && x.incomingModel != "" && x.targetModel != x.incomingModel
}

// rewriteModelBack gives the client the model name it asked for, as GIE does.
func (x *exchange) rewriteModelBack(body []byte) []byte {
	if !x.needsModelRewrite() {
		return body
	}
	out := bytes.ReplaceAll(body, []byte(`"model":"`+x.targetModel+`"`), []byte(`"model":"`+x.incomingModel+`"`))
	if !bytes.Equal(out, body) {
		return out
	}
	return bytes.ReplaceAll(body, []byte(`"model": "`+x.targetModel+`"`), []byte(`"model": "`+x.incomingModel+`"`))
}

func (x *exchange) sendResponseBody(b []byte, eos bool) error {
	resp := &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseBody{ResponseBody: &extProcPb.BodyResponse{
		Response: &extProcPb.CommonResponse{BodyMutation: &extProcPb.BodyMutation{
			Mutation: &extProcPb.BodyMutation_StreamedResponse{StreamedResponse: &extProcPb.StreamedBodyResponse{Body: b, EndOfStream: eos}},
		}},
	}}}
	if eos || x.respComplete {
		resp.DynamicMetadata = x.dynamic
	}
	return x.send(resp)
}

func (x *exchange) sendChunked(body []byte, eos bool) error {
	chunks := envoy.BuildChunkedBodyResponses(body, eos)
	for i, c := range chunks {
		resp := &extProcPb.ProcessingResponse{Response: &extProcPb.ProcessingResponse_ResponseBody{ResponseBody: &extProcPb.BodyResponse{Response: c}}}
		if i == len(chunks)-1 {
			resp.DynamicMetadata = x.dynamic
		}
		if err := x.send(resp); err != nil {
			return err
		}
	}
	return nil
}

func (x *exchange) bufferedResponse() bool {
	return x.responseBodyMode == filterPb.ProcessingMode_BUFFERED || x.responseBodyMode == filterPb.ProcessingMode_BUFFERED_PARTIAL
}
