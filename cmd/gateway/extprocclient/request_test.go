package extprocclient

import (
	"bytes"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/cmd/internal/extproctest"
)

func TestRoute(t *testing.T) {
	body := bytes.Repeat([]byte("0123456789"), 5000) // 50 KB: four 16 KiB frames
	routeMut := extproctest.SetHeaders("x-gateway-destination-endpoint", "10.0.0.250:1", "x-prefiller-host-port", "10.0.0.9:8000")
	routeMut.RemoveHeaders = []string{"X-Gateway-Destination-Endpoint-Subset"}
	lb := func(t *testing.T) *structpb.Struct {
		return lbMeta(t, map[string]any{LBNamespace: map[string]any{DestinationHeader: "10.0.0.1:8000, 10.0.0.2:8000"}})
	}
	tests := []struct {
		name      string
		body      []byte
		answer    func(t *testing.T) script
		wantErr   string // substring; the error must wrap ErrEPP
		wantFrame int
		check     func(t *testing.T, r *Routing)
	}{
		{name: "streamed like GIE: metadata wins, mutations kept", body: body, wantFrame: 4,
			answer: func(t *testing.T) script { return gieLike(routeMut, lb(t)) },
			check: func(t *testing.T, r *Routing) {
				if r.Immediate != nil || r.Status() != 0 || r.BodyMutation != BodyStreamed || !bytes.Equal(r.Body, body) {
					t.Fatalf("routing %v, body %s (%d B)", r.Immediate, r.BodyMutation, len(r.Body))
				}
				if got := r.Destinations(); !reflect.DeepEqual(got, []string{"10.0.0.1:8000", "10.0.0.2:8000"}) {
					t.Errorf("destinations %v", got)
				}
				if got := r.SetHeaders()["x-prefiller-host-port"]; got != "10.0.0.9:8000" {
					t.Errorf("prefill header %q", got)
				}
				if got := r.RemovedHeaders(); !reflect.DeepEqual(got, []string{"x-gateway-destination-endpoint-subset"}) {
					t.Errorf("removed %v", got)
				}
				if r.Routed <= 0 || r.Done < r.Routed {
					t.Errorf("timings routed %v done %v", r.Routed, r.Done)
				}
			}},
		{name: "header only destination, no body", wantFrame: 0,
			answer: func(*testing.T) script {
				return gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.3:8000"), nil)
			},
			check: func(t *testing.T, r *Routing) {
				if got := r.Destinations(); !reflect.DeepEqual(got, []string{"10.0.0.3:8000"}) || r.DynamicMetadata != nil {
					t.Errorf("destinations %v, metadata %v", got, r.DynamicMetadata)
				}
			}},
		{name: "immediate 429 with headers and body", body: body, wantFrame: 4,
			answer: func(*testing.T) script {
				return onBodyEnd(immediate(typev3.StatusCode_TooManyRequests, `{"error":"busy"}`, extproctest.SetHeaders("retry-after", "1")))
			},
			check: func(t *testing.T, r *Routing) {
				if r.Status() != 429 || string(r.Immediate.GetBody()) != `{"error":"busy"}` ||
					HeaderValue(r.Immediate.GetHeaders().GetSetHeaders()[0].GetHeader()) != "1" || r.Body != nil {
					t.Fatalf("immediate %v", r.Immediate)
				}
			}},
		{name: "immediate without a status is 200, as in Envoy", body: []byte("x"), wantFrame: 1,
			answer: func(*testing.T) script {
				return onBodyEnd(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ImmediateResponse{
					ImmediateResponse: &extprocv3.ImmediateResponse{}}})
			},
			check: func(t *testing.T, r *Routing) {
				if r.Status() != 200 {
					t.Fatalf("status %d", r.Status())
				}
			}},
		{name: "continue and replace on the headers reply", body: []byte(`{"model":"a"}`), wantFrame: 1,
			answer: func(*testing.T) script {
				return onBodyEnd(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_RequestHeaders{
					RequestHeaders: &extprocv3.HeadersResponse{Response: &extprocv3.CommonResponse{
						Status:       extprocv3.CommonResponse_CONTINUE_AND_REPLACE,
						BodyMutation: &extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_Body{Body: []byte(`{"model":"b"}`)}}}}}})
			},
			check: func(t *testing.T, r *Routing) {
				if r.BodyMutation != BodyReplaced || string(r.Body) != `{"model":"b"}` {
					t.Fatalf("body %s %q", r.BodyMutation, r.Body)
				}
			}},
		{name: "body reply without a mutation keeps the original", body: body, wantFrame: 4,
			answer: func(*testing.T) script { return onBodyEnd(headersReply(nil, nil), bodyReply(nil)) },
			check: func(t *testing.T, r *Routing) {
				if r.BodyMutation != BodyUnchanged || !bytes.Equal(r.Body, body) || len(r.HeaderMutations) != 0 {
					t.Fatalf("body %s (%d B), mutations %v", r.BodyMutation, len(r.Body), r.HeaderMutations)
				}
			}},
		{name: "clear body", body: []byte("x"), wantFrame: 1,
			answer: func(*testing.T) script {
				return onBodyEnd(headersReply(nil, nil), bodyReply(&extprocv3.BodyMutation{Mutation: &extprocv3.BodyMutation_ClearBody{ClearBody: true}}))
			},
			check: func(t *testing.T, r *Routing) {
				if r.BodyMutation != BodyCleared || r.Body != nil {
					t.Fatalf("body %s %q", r.BodyMutation, r.Body)
				}
			}},
		{name: "metadata merges across replies, later keys win", body: []byte("ab"), wantFrame: 1,
			answer: func(t *testing.T) script {
				last := extproctest.StreamedRequestBody([]byte("ab"), true)
				last.DynamicMetadata = lbMeta(t, map[string]any{LBNamespace: map[string]any{"k2": "v2", "k1": "new"}, "other": "x"})
				return onBodyEnd(headersReply(nil, lbMeta(t, map[string]any{LBNamespace: map[string]any{"k1": "v1", "k3": "v3"}})), last)
			},
			check: func(t *testing.T, r *Routing) {
				got := r.DynamicMetadata.AsMap()
				want := map[string]any{LBNamespace: map[string]any{"k1": "new", "k2": "v2", "k3": "v3"}, "other": "x"}
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("metadata %v", got)
				}
			}},
		{name: "body reply before the headers reply", body: []byte("x"), wantFrame: 1,
			answer:  func(*testing.T) script { return onBodyEnd(extproctest.StreamedRequestBody([]byte("x"), true)) },
			wantErr: "before the request headers reply"},
		{name: "unexpected reply type", body: []byte("x"), wantFrame: 1,
			answer: func(*testing.T) script {
				return onBodyEnd(&extprocv3.ProcessingResponse{Response: &extprocv3.ProcessingResponse_ResponseHeaders{}})
			},
			wantErr: "unexpected reply"},
		{name: "stream ended before the answer", body: []byte("x"), wantFrame: 1,
			answer: func(*testing.T) script {
				return func(req *extprocv3.ProcessingRequest, _ []byte) ([]*extprocv3.ProcessingResponse, error) {
					if req.GetRequestBody().GetEndOfStream() {
						return []*extprocv3.ProcessingResponse{headersReply(nil, nil)}, extproctest.ErrEndStream
					}
					return nil, nil
				}
			},
			wantErr: "stream ended before the exchange was complete"},
		{name: "silent EPP hits the message timeout", body: []byte("x"), wantFrame: 1,
			answer:  func(*testing.T) script { return onBodyEnd() },
			wantErr: "no message within the message timeout"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := &fakeEPP{answer: tt.answer(t)}
			ctx, s := openStream(t, f, Options{MessageTimeout: 300 * time.Millisecond})
			r, err := s.Route(ctx, HeaderMap(map[string]string{":method": "POST", ":path": "/v1/completions"}), tt.body)
			if tt.wantErr != "" {
				if err == nil || !errors.Is(err, ErrEPP) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want ErrEPP with %q", err, tt.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				tt.check(t, r)
			}
			got := f.received()
			if len(got) != 1+tt.wantFrame {
				t.Fatalf("server saw %d messages, want headers + %d frames", len(got), tt.wantFrame)
			}
			pc := got[0].GetProtocolConfig()
			if got[0].GetRequestHeaders() == nil || pc.GetRequestBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED ||
				pc.GetResponseBodyMode() != extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED {
				t.Errorf("first message %v", got[0])
			}
			if got[0].GetRequestHeaders().GetEndOfStream() != (len(tt.body) == 0) {
				t.Errorf("headers end_of_stream = %v with a %d B body", got[0].GetRequestHeaders().GetEndOfStream(), len(tt.body))
			}
			var sent []byte
			for i, m := range got[1:] {
				if m.GetProtocolConfig() != nil || m.GetRequestBody().GetEndOfStream() != (i == tt.wantFrame-1) {
					t.Errorf("frame %d: %v", i, m)
				}
				sent = append(sent, m.GetRequestBody().GetBody()...)
			}
			if !bytes.Equal(sent, tt.body) {
				t.Errorf("server got %d B, want %d", len(sent), len(tt.body))
			}
		})
	}
}

// An EPP that rejects a body mid-stream answers and closes while frames are still on their
// way: its answer, not the send error, is what Route returns.
func TestRouteImmediateMidBodyWins(t *testing.T) {
	f := &fakeEPP{answer: func(req *extprocv3.ProcessingRequest, _ []byte) ([]*extprocv3.ProcessingResponse, error) {
		if req.GetRequestBody() != nil {
			return []*extprocv3.ProcessingResponse{immediate(typev3.StatusCode_PayloadTooLarge, "too large", nil)}, extproctest.ErrEndStream
		}
		return nil, nil
	}}
	ctx, s := openStream(t, f, Options{MessageTimeout: time.Second, ChunkSize: 1024})
	r, err := s.Route(ctx, HeaderMap(map[string]string{":path": "/"}), bytes.Repeat([]byte("x"), 4<<20))
	if err != nil || r.Status() != 413 {
		t.Fatalf("routing %v, err %v", r, err)
	}
}

func TestHeaderMapOrder(t *testing.T) {
	m := HeaderMap(map[string]string{"B": "2", ":method": "POST", "a": "1", ":authority": "h", ":x-custom": "c", ":path": "/"})
	var got []string
	for _, h := range m.GetHeaders() {
		got = append(got, h.GetKey()+"="+string(h.GetRawValue()))
	}
	want := []string{":authority=h", ":path=/", ":method=POST", ":x-custom=c", "a=1", "b=2"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

func TestOpenWithoutClients(t *testing.T) {
	if _, err := New(Options{}).Open(ctxFor(t)); err == nil {
		t.Fatal("Open on a client without gRPC clients succeeded")
	}
}

func TestDiscardRequestBody(t *testing.T) {
	body := bytes.Repeat([]byte("y"), 40<<10)
	ctx, s := openStream(t, &fakeEPP{answer: gieLike(extproctest.SetHeaders(DestinationHeader, "10.0.0.1:8000"), nil)},
		Options{MessageTimeout: time.Second, DiscardRequestBody: true})
	r, err := s.Route(ctx, HeaderMap(map[string]string{":path": "/"}), body)
	if err != nil || r.Body != nil || r.BodyMutation != BodyStreamed || r.Destinations()[0] != "10.0.0.1:8000" {
		t.Fatalf("routing %+v, err %v", r, err)
	}
}
