package extprocclient

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"

	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

// routed opens a stream on a GIE-like fake and completes the request phase.
func routed(t *testing.T, f *fakeEPP, opts Options) *Stream {
	t.Helper()
	ctx, s := openStream(t, f, opts)
	if _, err := s.Route(ctx, HeaderMap(map[string]string{":path": "/"}), []byte(`{"prompt":"p"}`)); err != nil {
		t.Fatal(err)
	}
	return s
}

func TestResponsePhase(t *testing.T) {
	withRespBody := func(reply func(*extprocv3.HttpBody) []*extprocv3.ProcessingResponse) func(*extprocv3.ProcessingRequest, []byte) ([]*extprocv3.ProcessingResponse, error) {
		gie := gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil)
		return func(req *extprocv3.ProcessingRequest, body []byte) ([]*extprocv3.ProcessingResponse, error) {
			if rb := req.GetResponseBody(); rb != nil {
				return reply(rb), nil
			}
			return gie(req, body)
		}
	}
	tests := []struct {
		name    string
		answer  script
		body    io.Reader
		want    string
		wantErr func(error) bool
	}{
		{name: "streamed back frame by frame", answer: gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil),
			body: strings.NewReader("data: hello\n\ndata: [DONE]\n\n"), want: "DATA: HELLO\n\nDATA: [DONE]\n\n"},
		{name: "whole-body and clear replies are written, then the streamed end",
			answer: withRespBody(func(rb *extprocv3.HttpBody) []*extprocv3.ProcessingResponse {
				if !rb.GetEndOfStream() {
					return nil
				}
				return []*extprocv3.ProcessingResponse{
					{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
						BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte("whole")}}}}}},
					{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{Response: &extprocv3.CommonResponse{
						BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}}}}},
					extproctest.StreamedResponseBody([]byte("!"), true),
				}
			}),
			body: strings.NewReader("abc"), want: "whole!"},
		{name: "immediate after the response headers is the EPP's failure",
			answer: withRespBody(func(*extprocv3.HttpBody) []*extprocv3.ProcessingResponse {
				return []*extprocv3.ProcessingResponse{immediate(typev3.StatusCode_InternalServerError, "", nil)}
			}),
			body: strings.NewReader("abc"), wantErr: func(err error) bool { return errors.Is(err, ErrEPP) && strings.Contains(err.Error(), "status 500") }},
		{name: "reply without a mutation violates FULL_DUPLEX_STREAMED",
			answer: withRespBody(func(*extprocv3.HttpBody) []*extprocv3.ProcessingResponse {
				return []*extprocv3.ProcessingResponse{{Response: &extprocv3.ProcessingResponse_ResponseBody{ResponseBody: &extprocv3.BodyResponse{}}}}
			}),
			body: strings.NewReader("abc"), wantErr: func(err error) bool { return errors.Is(err, ErrEPP) }},
		{name: "upstream read failure is not the EPP's",
			answer: withRespBody(func(*extprocv3.HttpBody) []*extprocv3.ProcessingResponse { return nil }),
			body:   iotest.ErrReader(errors.New("upstream reset")),
			wantErr: func(err error) bool {
				var re *BodyReadError
				return errors.As(err, &re) && !errors.Is(err, ErrEPP) && strings.Contains(err.Error(), "upstream reset")
			}},
		{name: "the bytes read with a failure still reach the client before the reset",
			answer: gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil),
			body:   io.MultiReader(strings.NewReader("data: a\n\n"), &failingRead{data: "data: {\"error\":\"kv\"}\n\n", err: errors.New("unexpected EOF")}),
			want:   "DATA: A\n\nDATA: {\"ERROR\":\"KV\"}\n\n",
			wantErr: func(err error) bool {
				var re *BodyReadError
				return errors.As(err, &re) && strings.Contains(err.Error(), "unexpected EOF")
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEPP{answer: tt.answer}
			s := routed(t, f, Options{MessageTimeout: 2 * time.Second, ChunkSize: 8})
			ctx := ctxFor(t)
			hr, err := s.ResponseHeaders(ctx, HeaderMap(map[string]string{":status": "200"}), "10.0.0.1:8000", false)
			if err != nil || hr.Immediate != nil || HeaderValue(hr.Mutation.GetSetHeaders()[0].GetHeader()) != "1" {
				t.Fatalf("headers reply %+v, err %v", hr, err)
			}
			var out bytes.Buffer
			err = s.RelayResponseBody(ctx, tt.body, func(b []byte) error { _, werr := out.Write(b); return werr })
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("err = %v", err)
				}
				if tt.want != "" && out.String() != tt.want {
					t.Fatalf("relayed %q before the failure, want %q", out.String(), tt.want)
				}
				return
			}
			if err != nil || out.String() != tt.want {
				t.Fatalf("relayed %q, err %v; want %q", out.String(), err, tt.want)
			}
			if err := s.Finish(ctx); err != nil {
				t.Fatalf("finish: %v", err)
			}
			for _, m := range f.received() {
				if rh := m.GetResponseHeaders(); rh != nil {
					served := m.GetMetadataContext().GetFilterMetadata()[LBNamespace].GetFields()[ServedKey].GetStringValue()
					if served != "10.0.0.1:8000" {
						t.Errorf("served metadata %q", served)
					}
				}
			}
		})
	}
}

func TestResponseHeadersImmediate(t *testing.T) {
	gie := gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil)
	f := &fakeEPP{answer: func(req *extprocv3.ProcessingRequest, body []byte) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetResponseHeaders() != nil {
			return []*extprocv3.ProcessingResponse{immediate(typev3.StatusCode_BadGateway, "no", nil)}, nil
		}
		return gie(req, body)
	}}
	s := routed(t, f, Options{MessageTimeout: time.Second})
	hr, err := s.ResponseHeaders(ctxFor(t), HeaderMap(map[string]string{":status": "200"}), "", true)
	if err != nil || ImmediateStatus(hr.Immediate) != 502 || hr.Mutation != nil {
		t.Fatalf("reply %+v, err %v", hr, err)
	}
	if md := f.received()[len(f.received())-1].GetMetadataContext(); md != nil {
		t.Errorf("metadata_context %v sent without a served endpoint", md)
	}
}

// Finish expects the EPP to end the stream once the client half-closes; a stray message is
// a protocol error.
func TestFinishWantsTheStreamToEnd(t *testing.T) {
	gie := gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil)
	f := &fakeEPP{answer: func(req *extprocv3.ProcessingRequest, body []byte) ([]*extprocv3.ProcessingResponse, error) {
		out, err := gie(req, body)
		if req.GetRequestBody().GetEndOfStream() {
			out = append(out, headersReply(nil, nil)) // one reply too many
		}
		return out, err
	}}
	s := routed(t, f, Options{MessageTimeout: time.Second})
	if err := s.Finish(ctxFor(t)); err == nil || !errors.Is(err, ErrEPP) {
		t.Fatalf("err = %v, want a protocol error", err)
	}
}

// failingRead returns data together with err in one Read, as an HTTP body does when the
// connection breaks right after the last bytes arrived.
type failingRead struct {
	data string
	err  error
	done bool
}

func (r *failingRead) Read(p []byte) (int, error) {
	if r.done {
		return 0, r.err
	}
	r.done = true
	return copy(p, r.data), r.err
}
