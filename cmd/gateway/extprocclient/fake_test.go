package extprocclient

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

// script answers one request message; body is the request body received so far. An error
// ends the stream after the replies: extproctest.ErrEndStream cleanly, any other as a failure.
type script func(req *extprocv3.ProcessingRequest, body []byte) ([]*extprocv3.ProcessingResponse, error)

// fakeEPP is a real gRPC ext_proc server whose replies a test scripts; it records every
// message it receives.
type fakeEPP struct {
	extprocv3.UnimplementedExternalProcessorServer
	answer script

	mu  sync.Mutex
	got []*extprocv3.ProcessingRequest
}

func (f *fakeEPP) Process(srv extprocv3.ExternalProcessor_ProcessServer) error {
	var body []byte
	return extproctest.Receive(srv, func(req *extprocv3.ProcessingRequest) error {
		f.mu.Lock()
		f.got = append(f.got, req)
		f.mu.Unlock()
		body = append(body, req.GetRequestBody().GetBody()...)
		replies, err := f.answer(req, body)
		for _, r := range replies {
			if serr := srv.Send(r); serr != nil {
				return serr
			}
		}
		return err // extproctest.ErrEndStream ends the stream cleanly after the replies
	})
}

func (f *fakeEPP) received() []*extprocv3.ProcessingRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]*extprocv3.ProcessingRequest(nil), f.got...)
}

// start serves f on an in-memory listener and returns a client of it.
func start(t *testing.T, f *fakeEPP, opts Options) *Client {
	t.Helper()
	c, err := Dial(extproctest.InMemoryTarget, opts, extproctest.InMemory(t, f))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// gieLike answers as GIE's streaming server does: once the body is complete, a headers reply
// (mutation and metadata from the test), then the body streamed back in two frames; the
// response headers get an empty reply and the response body is streamed back upper-cased.
func gieLike(mut *extprocv3.HeaderMutation, meta *structpb.Struct) script {
	return func(req *extprocv3.ProcessingRequest, body []byte) ([]*extprocv3.ProcessingResponse, error) {
		switch v := req.GetRequest().(type) {
		case *extprocv3.ProcessingRequest_RequestHeaders:
			if v.RequestHeaders.GetEndOfStream() {
				return []*extprocv3.ProcessingResponse{headersReply(mut, meta)}, nil
			}
		case *extprocv3.ProcessingRequest_RequestBody:
			if v.RequestBody.GetEndOfStream() {
				half := len(body) / 2
				return []*extprocv3.ProcessingResponse{headersReply(mut, meta),
					extproctest.StreamedRequestBody(body[:half], false), extproctest.StreamedRequestBody(body[half:], true)}, nil
			}
		case *extprocv3.ProcessingRequest_ResponseHeaders:
			return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseHeaders{
				ResponseHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: extproctest.SetHeaders("x-resp", "1")}}}}}, nil
		case *extprocv3.ProcessingRequest_ResponseBody:
			return []*extprocv3.ProcessingResponse{extproctest.StreamedResponseBody(bytes.ToUpper(v.ResponseBody.GetBody()), v.ResponseBody.GetEndOfStream())}, nil
		}
		return nil, nil
	}
}

// onBodyEnd answers only the request's last body frame (or its headers when there is no body).
func onBodyEnd(replies ...*extprocv3.ProcessingResponse) script {
	return func(req *extprocv3.ProcessingRequest, _ []byte) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestBody().GetEndOfStream() || req.GetRequestHeaders().GetEndOfStream() {
			return replies, nil
		}
		return nil, nil
	}
}

func headersReply(mut *extprocv3.HeaderMutation, meta *structpb.Struct) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{DynamicMetadata: meta, Response: &extprocv3.ProcessingResponse_RequestHeaders{
		RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{HeaderMutation: mut}}}}
}

func bodyReply(bm *extprocv3.BodyMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestBody{
		RequestBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{BodyMutation: bm}}}}
}

func immediate(code typev3.StatusCode, body string, mut *extprocv3.HeaderMutation) *extprocv3.ProcessingResponse {
	return &extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
		ImmediateResponse: &extprocv3.ImmediateResponse{Status: &typev3.HttpStatus{Code: code}, Body: []byte(body), Headers: mut}}}
}

func lbMeta(t *testing.T, fields map[string]any) *structpb.Struct {
	t.Helper()
	st, err := structpb.NewStruct(fields)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// openStream dials f with opts and opens a stream on it; both close when the test ends.
func openStream(t *testing.T, f *fakeEPP, opts Options) (context.Context, *Stream) {
	t.Helper()
	ctx := ctxFor(t)
	s, err := start(t, f, opts).Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Close)
	return ctx, s
}

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}
