package extprocclient

import (
	"bytes"
	"context"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// BodyMutation says what the EPP's replies did to the request body.
type BodyMutation int

const (
	// BodyUnchanged: no reply carried a mutation; the original body goes upstream.
	BodyUnchanged BodyMutation = iota
	// BodyStreamed: the EPP streamed the body back (FULL_DUPLEX_STREAMED); Body joins the frames.
	BodyStreamed
	// BodyReplaced: a reply replaced the whole body.
	BodyReplaced
	// BodyCleared: a reply cleared the body.
	BodyCleared
)

func (b BodyMutation) String() string {
	return [...]string{"unchanged", "streamed", "replaced", "cleared"}[b]
}

// Routing is the EPP's answer to the request phase.
type Routing struct {
	// Immediate is the EPP's ImmediateResponse; nil when it let the request through. When set,
	// the other fields hold what arrived before it.
	Immediate *extprocv3.ImmediateResponse
	// HeaderMutations are the mutations of the request headers reply and of every request body
	// reply, in arrival order (apply each one's removals, then its sets, as Envoy does).
	HeaderMutations []*extprocv3.HeaderMutation
	// DynamicMetadata merges every reply's dynamic_metadata namespace by namespace (a later
	// key wins); nil when no reply carried any.
	DynamicMetadata *structpb.Struct
	// Body is the request body to forward upstream: the frames the EPP streamed back joined, a
	// replacement, nil when cleared, or the frames sent when unchanged.
	Body []byte
	// BodyMutation says which of those Body is.
	BodyMutation BodyMutation
	// Routed runs from the request's last frame sent to the request headers reply (or the
	// ImmediateResponse): the latency the EPP adds before Envoy can connect upstream.
	Routed time.Duration
	// Done runs from the request's last frame sent to the last request-phase reply.
	Done time.Duration
}

// Status is the ImmediateResponse's HTTP status, 0 when the request was routed.
func (r *Routing) Status() int {
	if r.Immediate == nil {
		return 0
	}
	return ImmediateStatus(r.Immediate)
}

// SetHeaders returns the headers the EPP set, lower-case name to the last value set.
func (r *Routing) SetHeaders() map[string]string {
	out := map[string]string{}
	for _, m := range r.HeaderMutations {
		for _, o := range m.GetSetHeaders() {
			out[strings.ToLower(o.GetHeader().GetKey())] = HeaderValue(o.GetHeader())
		}
	}
	return out
}

// RemovedHeaders returns the lower-case names the EPP removed, in arrival order.
func (r *Routing) RemovedHeaders() []string {
	var out []string
	for _, m := range r.HeaderMutations {
		for _, k := range m.GetRemoveHeaders() {
			out = append(out, strings.ToLower(k))
		}
	}
	return out
}

// Header returns the last value the EPP set for name (case-insensitive).
func (r *Routing) Header(name string) (string, bool) {
	v, ok := "", false
	for _, m := range r.HeaderMutations {
		for _, o := range m.GetSetHeaders() {
			if strings.EqualFold(o.GetHeader().GetKey(), name) {
				v, ok = HeaderValue(o.GetHeader()), true
			}
		}
	}
	return v, ok
}

// Metadata returns the string value at namespace/key of the dynamic metadata ("" if none).
func (r *Routing) Metadata(namespace, key string) string {
	return r.DynamicMetadata.GetFields()[namespace].GetStructValue().GetFields()[key].GetStringValue()
}

// Destinations returns the endpoints the EPP picked, primary first: the envoy.lb dynamic
// metadata wins (Envoy's original-destination cluster reads it), the header it set is the
// fallback.
func (r *Routing) Destinations() []string {
	raw := r.Metadata(LBNamespace, DestinationHeader)
	if raw == "" {
		raw, _ = r.Header(DestinationHeader)
	}
	return SplitEndpoints(raw)
}

// SendRequestHeaders sends the request headers; the first message of a stream also declares
// FULL_DUPLEX_STREAMED bodies both ways, as Envoy does under GIE's configuration.
// endOfStream says the request has no body.
func (s *Stream) SendRequestHeaders(headers *corev3.HeaderMap, endOfStream bool) error {
	req := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headers, EndOfStream: endOfStream}}}
	if !s.headersSent {
		req.ProtocolConfig = &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		}
		s.headersSent = true
	}
	s.expectBody = !endOfStream
	err := s.send(req)
	if endOfStream || err != nil {
		s.ended = time.Now()
	}
	return err
}

// SendRequestBody sends one request body frame; endOfStream marks the last. The stream keeps
// chunk (not a copy) until the request phase ends: the caller must not reuse it before then.
func (s *Stream) SendRequestBody(chunk []byte, endOfStream bool) error {
	s.sent = append(s.sent, chunk)
	err := s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
		RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: endOfStream}}})
	if endOfStream || err != nil {
		s.ended = time.Now()
	}
	return err
}

// SendRequest sends the headers and then body in frames of the client's ChunkSize,
// end_of_stream on the last. It stops at the first failed send: the EPP may have answered
// (413, 400) and closed the stream, so AwaitRouting should still read its reply.
func (s *Stream) SendRequest(headers *corev3.HeaderMap, body []byte) error {
	if err := s.SendRequestHeaders(headers, len(body) == 0); err != nil {
		return err
	}
	for off := 0; off < len(body); off += s.chunk {
		end := min(off+s.chunk, len(body))
		if err := s.SendRequestBody(body[off:end], end == len(body)); err != nil {
			return err
		}
	}
	return nil
}

// Route sends the request and reads the EPP's answer. An ImmediateResponse that arrived
// although a send failed wins over the send error, as in Envoy: an EPP that rejects a body
// answers and closes the stream while frames are still on their way.
func (s *Stream) Route(ctx context.Context, headers *corev3.HeaderMap, body []byte) (*Routing, error) {
	sendErr := s.SendRequest(headers, body)
	r, err := s.AwaitRouting(ctx)
	if r != nil && r.Immediate != nil {
		return r, nil
	}
	if sendErr != nil {
		return nil, sendErr
	}
	return r, err
}

// AwaitRouting reads the EPP's request-phase replies: the request headers reply, then the
// body replies up to the streamed end_of_stream, or an ImmediateResponse at any point.
func (s *Stream) AwaitRouting(ctx context.Context) (*Routing, error) {
	if s.ended.IsZero() {
		s.ended = time.Now()
	}
	r := &Routing{}
	gotHeaders, bodyDone := false, !s.expectBody
	streamed := &bodyBuffer{discard: s.discard}
	for !gotHeaders || !bodyDone {
		m, err := s.next(ctx, armedNow)
		if err != nil {
			return nil, err
		}
		r.DynamicMetadata = mergeMetadata(r.DynamicMetadata, m.GetDynamicMetadata())
		switch v := m.GetResponse().(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			r.Immediate = v.ImmediateResponse
			r.Routed = time.Since(s.ended)
			r.Done = r.Routed
			r.Body, r.BodyMutation = nil, BodyUnchanged
			return r, nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			r.Routed = time.Since(s.ended)
			gotHeaders = true
			cr := v.RequestHeaders.GetResponse()
			r.addMutation(cr.GetHeaderMutation())
			if bm := cr.GetBodyMutation(); bm != nil && cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
				// The reply replaces the body outright; body frames are not answered.
				r.applyBody(bm, streamed)
				bodyDone = true
			}
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return nil, eppErr("request body reply before the request headers reply")
			}
			cr := v.RequestBody.GetResponse()
			r.addMutation(cr.GetHeaderMutation())
			bodyDone = r.applyBody(cr.GetBodyMutation(), streamed)
		case *extprocv3.ProcessingResponse_RequestTrailers:
		default:
			return nil, eppErr("unexpected reply %T in the request phase", m.GetResponse())
		}
	}
	r.Done = time.Since(s.ended)
	switch {
	case s.discard:
		r.Body = nil
	case r.BodyMutation == BodyStreamed:
		r.Body = streamed.Bytes()
	case r.BodyMutation == BodyUnchanged:
		r.Body = bytes.Join(s.sent, nil)
	}
	s.sent = nil
	return r, nil
}

func (r *Routing) addMutation(m *extprocv3.HeaderMutation) {
	if len(m.GetSetHeaders()) > 0 || len(m.GetRemoveHeaders()) > 0 {
		r.HeaderMutations = append(r.HeaderMutations, m)
	}
}

// applyBody folds one body reply into r and reports whether the body phase is over. Streamed
// frames accumulate until end_of_stream; a replacement, a clear or a reply without a mutation
// ends it, the last one keeping the original body.
func (r *Routing) applyBody(bm *extprocv3.BodyMutation, streamed *bodyBuffer) bool {
	switch mm := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_StreamedResponse:
		if r.BodyMutation != BodyStreamed {
			streamed.Reset()
		}
		r.BodyMutation = BodyStreamed
		streamed.add(mm.StreamedResponse.GetBody())
		return mm.StreamedResponse.GetEndOfStream()
	case *extprocv3.BodyMutation_Body:
		r.Body, r.BodyMutation = mm.Body, BodyReplaced
	case *extprocv3.BodyMutation_ClearBody:
		r.Body, r.BodyMutation = nil, BodyCleared
	default:
		r.Body, r.BodyMutation = nil, BodyUnchanged
	}
	return true
}

// bodyBuffer collects the streamed body frames unless the caller discards them.
type bodyBuffer struct {
	bytes.Buffer
	discard bool
}

func (b *bodyBuffer) add(p []byte) {
	if !b.discard {
		b.Buffer.Write(p)
	}
}
