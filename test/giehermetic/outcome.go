package giehermetic

import (
	"context"
	"errors"
	"io"
	"strings"

	corePb "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extProcPb "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/google/uuid"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	envoy "sigs.k8s.io/gateway-api-inference-extension/pkg/common/envoy"
	reqcommon "sigs.k8s.io/gateway-api-inference-extension/pkg/common/request"
	"sigs.k8s.io/gateway-api-inference-extension/pkg/epp/metadata"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Exchange sends every message of reqs on one stream, as GIE's hermetic harness does, closes
// the sending side as Envoy does at the end of a request, and collects every response until
// the server ends the stream or ctx ends.
func Exchange(ctx context.Context, client extProcPb.ExternalProcessorClient, reqs []*extProcPb.ProcessingRequest) ([]*extProcPb.ProcessingResponse, error) {
	stream, err := client.Process(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range reqs {
		if err := stream.Send(r); err != nil {
			break // the server ended the stream (an immediate response); collect what it sent
		}
	}
	_ = stream.CloseSend()
	var out []*extProcPb.ProcessingResponse
	for {
		resp, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		out = append(out, resp)
	}
}

// DropErrorCause applies the documented header difference of answers: pdgate names the cause of
// every answer it makes itself in x-pdgate-error-cause, which GIE does not send. It removes the
// header from o's answer and reports whether an answer without it was found (false when there
// is no answer).
func DropErrorCause(o *Outcome) (unnamed bool) {
	if o.Immediate == nil {
		return false
	}
	unnamed = o.Immediate.Headers[protocol.HeaderErrorCause] == ""
	delete(o.Immediate.Headers, protocol.HeaderErrorCause)
	return unnamed
}

// Outcome is what an ext_proc exchange means to the gateway, the client and the model server,
// after the documented differences are normalised away.
type Outcome struct {
	// StreamErr is the gRPC status of a stream that did not end cleanly.
	StreamErr string
	Immediate *Immediate
	// Routed: a routing decision (request-headers response) was sent.
	Routed          bool
	Destination     string
	LBMetadata      string
	ClearRouteCache bool
	// UpstreamHeaders are the request headers the model server gets: the client's headers with
	// the mutation applied, minus protocol.RoutingHeaders (pdgate removes client copies).
	UpstreamHeaders map[string]string
	// UpstreamBody is the concatenation of the request-body frames; UpstreamEOS reports that
	// the last one ended the stream.
	UpstreamBody string
	UpstreamEOS  bool
	// Response phase: headers the client gets (engine's + mutation, minus GIE's debugging
	// header), the body frames concatenated, the dynamic metadata of the last frame.
	RespHeaders  map[string]string
	RespBody     string
	RespEOS      bool
	RespMetadata string
	Trailers     bool
	// DebugHeader: the response-header mutation carried GIE's x-went-into-resp-headers.
	DebugHeader bool
	// Metrics are GIE metric series the exchange produced, filled by the suite that reads them.
	Metrics map[string]string
}

// DroppedReasonHeader is llm-d's drop-reason header, which pdgate's admission adds to GIE's
// saturation and flow-control answers.
const DroppedReasonHeader = "x-llm-d-request-dropped-reason"

// Immediate is an immediate response: status, body, headers set.
type Immediate struct {
	Status  int
	Body    string
	Headers map[string]string
}

func headerMap(h *extProcPb.HttpHeaders) map[string]string {
	if h == nil {
		return nil
	}
	out := map[string]string{}
	for _, hv := range h.GetHeaders().GetHeaders() {
		out[strings.ToLower(hv.GetKey())] = envoy.GetHeaderValue(hv)
	}
	return out
}

// ApplyMutation applies m to dst as Envoy does: set, then remove (keys lower-cased).
func ApplyMutation(dst map[string]string, m *extProcPb.HeaderMutation) {
	for _, h := range m.GetSetHeaders() {
		dst[strings.ToLower(h.GetHeader().GetKey())] = HeaderValue(h.GetHeader())
	}
	for _, k := range m.GetRemoveHeaders() {
		delete(dst, strings.ToLower(k))
	}
}

// HeaderValue is the header's raw value, else its value.
func HeaderValue(h *corePb.HeaderValue) string {
	if len(h.GetRawValue()) > 0 {
		return string(h.GetRawValue())
	}
	return h.GetValue()
}

// Normalise turns one exchange (reqs sent, resps received, the stream's error) into its
// outcome.
func Normalise(reqs []*extProcPb.ProcessingRequest, resps []*extProcPb.ProcessingResponse, streamErr error) Outcome {
	var o Outcome
	if streamErr != nil {
		o.StreamErr = status.Code(streamErr).String() + ": " + status.Convert(streamErr).Message()
	}
	var reqHeaders, respHeaders map[string]string
	for _, r := range reqs {
		switch {
		case r.GetRequestHeaders() != nil:
			reqHeaders = headerMap(r.GetRequestHeaders())
		case r.GetResponseHeaders() != nil:
			respHeaders = headerMap(r.GetResponseHeaders())
		}
	}
	var upstream, resp strings.Builder
	for _, r := range resps {
		switch {
		case r.GetImmediateResponse() != nil:
			ir := r.GetImmediateResponse()
			im := &Immediate{Status: int(ir.GetStatus().GetCode()), Body: string(ir.GetBody())}
			if len(ir.GetHeaders().GetSetHeaders()) > 0 {
				im.Headers = map[string]string{}
				ApplyMutation(im.Headers, ir.GetHeaders())
				// Documented difference: pdgate's admission adds llm-d's drop-reason header to
				// the answers GIE gives without one (cmd/epp/admission).
				delete(im.Headers, DroppedReasonHeader)
				if len(im.Headers) == 0 {
					im.Headers = nil
				}
			}
			AsJSONError(im)
			o.Immediate = im
		case r.GetRequestHeaders() != nil:
			common := r.GetRequestHeaders().GetResponse()
			o.Routed = true
			o.ClearRouteCache = common.GetClearRouteCache()
			o.UpstreamHeaders = map[string]string{}
			for k, v := range reqHeaders {
				o.UpstreamHeaders[k] = v
			}
			ApplyMutation(o.UpstreamHeaders, common.GetHeaderMutation())
			o.Destination = o.UpstreamHeaders[metadata.DestinationEndpointKey]
			if md := r.GetDynamicMetadata(); md != nil {
				b, _ := protojson.MarshalOptions{Multiline: false}.Marshal(md)
				o.LBMetadata = canonicalJSON(b)
			}
		case r.GetRequestBody() != nil:
			common := r.GetRequestBody().GetResponse()
			if sr := common.GetBodyMutation().GetStreamedResponse(); sr != nil {
				upstream.Write(sr.GetBody())
				o.UpstreamEOS = sr.GetEndOfStream()
			} else if b := common.GetBodyMutation().GetBody(); b != nil {
				upstream.Write(b)
				o.UpstreamEOS = true
			}
		case r.GetResponseHeaders() != nil:
			o.RespHeaders = map[string]string{}
			for k, v := range respHeaders {
				o.RespHeaders[k] = v
			}
			ApplyMutation(o.RespHeaders, r.GetResponseHeaders().GetResponse().GetHeaderMutation())
			_, o.DebugHeader = o.RespHeaders[DebugResponseHeader]
			delete(o.RespHeaders, DebugResponseHeader)
		case r.GetResponseBody() != nil:
			if sr := r.GetResponseBody().GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
				resp.Write(sr.GetBody())
				o.RespEOS = sr.GetEndOfStream()
			}
			if md := r.GetDynamicMetadata(); md != nil {
				b, _ := protojson.Marshal(md)
				o.RespMetadata = canonicalJSON(b)
			}
		case r.GetResponseTrailers() != nil:
			o.Trailers = true
		}
	}
	o.UpstreamBody, o.RespBody = upstream.String(), resp.String()
	if o.UpstreamHeaders != nil {
		for _, h := range protocol.RoutingHeaders {
			delete(o.UpstreamHeaders, h) // pdgate removes client copies on purpose
		}
		// A request without x-request-id gets a generated one on both paths; only its
		// presence and form can match.
		if _, had := reqHeaders[reqcommon.RequestIdHeaderKey]; !had {
			if id, ok := o.UpstreamHeaders[reqcommon.RequestIdHeaderKey]; ok {
				if _, err := uuid.Parse(id); err == nil {
					o.UpstreamHeaders[reqcommon.RequestIdHeaderKey] = "<generated uuid>"
				}
			}
		}
	}
	return o
}

// canonicalJSON re-renders protojson output, whose whitespace is deliberately unstable.
func canonicalJSON(b []byte) string {
	return strings.Join(strings.Fields(string(b)), "")
}

// gieErrorPrefix starts GIE v1.5.0's error bodies: "inference error: <Code> - <msg>".
const gieErrorPrefix = "inference error: "

// AsJSONError applies the documented body difference of GIE's errors (cmd/epp/README.md):
// pdgate answers them with an OpenAI JSON error body (GIE's message, protocol.TypeForStatus,
// the status as code) and content-type application/json where GIE sends its text. A GIE text
// body becomes that JSON answer; any other body is left as it is.
func AsJSONError(im *Immediate) {
	if im == nil || !strings.HasPrefix(im.Body, gieErrorPrefix) {
		return
	}
	_, msg, ok := strings.Cut(strings.TrimPrefix(im.Body, gieErrorPrefix), " - ")
	if !ok {
		return
	}
	im.Body = string(protocol.ErrorBody(im.Status, "", msg))
	if im.Headers == nil {
		im.Headers = map[string]string{}
	}
	im.Headers["content-type"] = protocol.ContentTypeJSON
}
