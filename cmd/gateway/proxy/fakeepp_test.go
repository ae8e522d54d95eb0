package proxy

import (
	"sync"
	"testing"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

// decision is what the fake EPP answers once the request body is complete.
type decision struct {
	dest      string // x-gateway-destination-endpoint header
	metaDest  string // envoy.lb metadata; defaults to dest
	set       map[string]string
	remove    []string
	body      []byte // replacement body; nil keeps the received one
	immediate *extprocv3.ImmediateResponse
	err       error // fail the stream
	silent    bool  // never answer (message timeout)
}

// seen is what the fake EPP received, for assertions.
type seen struct {
	mu           sync.Mutex
	reqHeaders   map[string]string
	reqHeaderEoS bool
	protoCfg     *extprocv3.ProtocolConfiguration
	bodyFrames   []*extprocv3.HttpBody
	respHeaders  map[string]string
	servedMeta   string
	respFrames   int
}

// fakeEPP behaves like GIE's streaming server in FULL_DUPLEX_STREAMED mode: nothing until
// the request body is complete, then the headers reply and the streamed body; the response
// headers are answered at once and every response chunk is returned (rewritten) at once.
type fakeEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	decide  func(headers map[string]string, body []byte) decision
	rewrite func([]byte) []byte
	// rejectOver, when set, answers with this ImmediateResponse and ends the stream as soon
	// as more than rejectOverBytes of body arrived, as an EPP with a body limit does.
	rejectOver      *extprocv3.ImmediateResponse
	rejectOverBytes int
	seen            seen
}

func (f *fakeEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	headers := map[string]string{}
	return extproctest.Receive(srv, func(req *extprocv3.ProcessingRequest) error {
		switch v := req.Request.(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			for _, h := range v.RequestHeaders.GetHeaders().GetHeaders() {
				headers[h.GetKey()] = string(h.GetRawValue())
			}
			f.seen.mu.Lock()
			f.seen.reqHeaders, f.seen.reqHeaderEoS, f.seen.protoCfg = headers, v.RequestHeaders.GetEndOfStream(), req.GetProtocolConfig()
			f.seen.mu.Unlock()
			if v.RequestHeaders.GetEndOfStream() {
				return f.route(srv, headers, nil, false)
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			f.seen.mu.Lock()
			f.seen.bodyFrames = append(f.seen.bodyFrames, v.RequestBody)
			f.seen.mu.Unlock()
			body = append(body, v.RequestBody.GetBody()...)
			if f.rejectOver != nil && len(body) > f.rejectOverBytes {
				if err := srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: f.rejectOver}}); err != nil {
					return err
				}
				return extproctest.ErrEndStream
			}
			if v.RequestBody.GetEndOfStream() {
				return f.route(srv, headers, body, true)
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			rh := map[string]string{}
			for _, h := range v.ResponseHeaders.GetHeaders().GetHeaders() {
				rh[h.GetKey()] = string(h.GetRawValue())
			}
			f.seen.mu.Lock()
			f.seen.respHeaders = rh
			if lb := req.GetMetadataContext().GetFilterMetadata()[LBMetadataNamespace]; lb != nil {
				f.seen.servedMeta = lb.GetFields()[ServedMetadataKey].GetStringValue()
			}
			f.seen.mu.Unlock()
			return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
					HeaderMutation: extproctest.SetHeaders("x-went-into-resp-headers", "true"),
				}},
			}})
		case *extprocv3.ProcessingRequest_ResponseBody:
			f.seen.mu.Lock()
			f.seen.respFrames++
			f.seen.mu.Unlock()
			chunk := v.ResponseBody.GetBody()
			if f.rewrite != nil {
				chunk = f.rewrite(chunk)
			}
			return srv.Send(extproctest.StreamedResponseBody(chunk, v.ResponseBody.GetEndOfStream()))
		}
		return nil
	})
}

func (f *fakeEPP) route(srv extprocv3.ExternalProcessor_ProcessServer, headers map[string]string, body []byte, hasBody bool) error {
	d := f.decide(headers, body)
	switch {
	case d.err != nil:
		return d.err
	case d.silent:
		<-srv.Context().Done()
		return nil
	case d.immediate != nil:
		return srv.Send(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{ImmediateResponse: d.immediate}})
	}
	if d.body != nil {
		body = d.body
	}
	mut := &extprocv3.HeaderMutation{RemoveHeaders: d.remove}
	if d.dest != "" {
		mut.SetHeaders = append(mut.SetHeaders, extproctest.SetHeader(DestinationHeader, d.dest))
	}
	for k, v := range d.set {
		mut.SetHeaders = append(mut.SetHeaders, extproctest.SetHeader(k, v))
	}
	meta := d.metaDest
	if meta == "" {
		meta = d.dest
	}
	dyn, _ := structpb.NewStruct(map[string]any{LBMetadataNamespace: map[string]any{DestinationHeader: meta}})
	if err := srv.Send(&extprocv3.ProcessingResponse{
		Response: &extprocv3.ProcessingResponse_RequestHeaders{RequestHeaders: &extprocv3.HeadersResponse{
			Response: &extprocv3.CommonResponse{HeaderMutation: mut, ClearRouteCache: true},
		}},
		DynamicMetadata: dyn,
	}); err != nil {
		return err
	}
	if !hasBody {
		return nil
	}
	// Two frames, as GIE splits large bodies, to exercise reassembly.
	half := len(body) / 2
	if err := srv.Send(extproctest.StreamedRequestBody(body[:half], false)); err != nil {
		return err
	}
	return srv.Send(extproctest.StreamedRequestBody(body[half:], true))
}

// startFakeEPP serves f on a loopback port over real gRPC and returns a client.
func startFakeEPP(t *testing.T, f *fakeEPP) extprocv3.ExternalProcessorClient {
	t.Helper()
	return extprocv3.NewExternalProcessorClient(extproctest.Dial(t, f))
}

func immediate(code int, body string, headers map[string]string) *extprocv3.ImmediateResponse {
	ir := &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: typev3.StatusCode(code)}, Body: []byte(body), Headers: &extprocv3.HeaderMutation{}}
	for k, v := range headers {
		ir.Headers.SetHeaders = append(ir.Headers.SetHeaders, extproctest.SetHeader(k, v))
	}
	return ir
}
