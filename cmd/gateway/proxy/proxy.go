package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	extprocfilterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/pdgate/pdgate/plugins/protocol"
)

// Names of the EPP protocol (GIE's pkg/epp/metadata): the destination the EPP picked and the
// endpoint the proxy actually served from.
const (
	DestinationHeader   = "x-gateway-destination-endpoint"
	LBMetadataNamespace = "envoy.lb"
	ServedMetadataKey   = "x-gateway-destination-endpoint-served"
)

// Gateway is the dev gateway's HTTP handler.
type Gateway struct {
	opts      Options
	client    extprocv3.ExternalProcessorClient
	transport *http.Transport
	log       logr.Logger
	metrics   *gatewayMetrics
}

// New builds a gateway around an ext_proc client.
func New(opts Options, client extprocv3.ExternalProcessorClient, m *gatewayMetrics) *Gateway {
	d := &net.Dialer{Timeout: opts.ConnectTimeout, KeepAlive: 30 * time.Second}
	tr := &http.Transport{
		DialContext:           d.DialContext,
		ResponseHeaderTimeout: opts.ResponseHeaderTimeout,
		MaxIdleConnsPerHost:   64,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
	if m == nil {
		m = newGatewayMetrics(nil)
	}
	return &Gateway{opts: opts, client: client, transport: tr, log: opts.Logger, metrics: m}
}

// exchange is one request's state as it crosses the gateway.
type exchange struct {
	w        http.ResponseWriter
	r        *http.Request
	reqHead  *headerSet
	orig     []byte // the client's body, kept for fail-open and fall-through
	body     []byte // the body after the EPP's mutations
	dynMeta  map[string]any
	sentBody bool // body frames were streamed to the EPP
	wrote    bool // response headers went to the client
	status   int
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.RequestTimeout)
	defer cancel()
	x := &exchange{w: w, r: r, dynMeta: map[string]any{}}
	defer func() { g.metrics.observe(x.status, time.Since(start)) }()
	if err := g.serve(ctx, x); err != nil {
		g.handleError(ctx, x, err)
	}
}

func (g *Gateway) serve(ctx context.Context, x *exchange) error {
	x.reqHead = requestHead(x.r)
	s, err := openSession(ctx, g.client, g.opts.MessageTimeout)
	if err != nil {
		return g.requestPhaseFailure(ctx, x, err)
	}
	defer s.close()
	sendErr := g.sendRequest(s, x)
	if sendErr != nil && !errors.Is(sendErr, errEPP) {
		return g.requestPhaseFailure(ctx, x, sendErr)
	}
	// Even when a send failed the EPP may have answered first: an EPP that rejects a request
	// (413 for an oversized body, 400 for a malformed one) sends its ImmediateResponse and
	// closes the stream while body frames are still on their way. Envoy honours that answer,
	// so the reply already received wins over the send error.
	done, err := g.awaitRouting(ctx, s, x)
	if done {
		return nil
	}
	if sendErr != nil {
		return g.requestPhaseFailure(ctx, x, sendErr)
	}
	if err != nil {
		return g.requestPhaseFailure(ctx, x, err)
	}
	resp, served, err := g.forward(ctx, x)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return g.relayResponse(ctx, s, x, resp, served)
}

// requestHead renders the client's request as Envoy presents it to ext_proc.
func requestHead(r *http.Request) *headerSet {
	h := r.Header.Clone()
	stripHopByHop(h)
	h.Del("Content-Length")
	if h.Get("X-Request-Id") == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		h.Set("X-Request-Id", hex.EncodeToString(b[:]))
	}
	if host, _, err := net.SplitHostPort(r.RemoteAddr); err == nil {
		h.Set("X-Forwarded-For", host)
	}
	scheme := "http"
	if r.TLS != nil {
		scheme = "https"
	}
	h.Set("X-Forwarded-Proto", scheme)
	return newHeaderSet(map[string]string{
		":method": r.Method, ":path": r.URL.RequestURI(), ":authority": r.Host, ":scheme": scheme,
	}, h)
}

// sendRequest streams the request headers and then the body in FULL_DUPLEX_STREAMED frames,
// end_of_stream on the last. The client's body is kept whole for fail-open and fall-through.
func (g *Gateway) sendRequest(s *session, x *exchange) error {
	if x.r.ContentLength > g.opts.MaxRequestBytes {
		return errTooLarge
	}
	hasBody := x.r.ContentLength != 0 && x.r.Body != nil && x.r.Body != http.NoBody
	first := &extprocv3.ProcessingRequest{
		Request: &extprocv3.ProcessingRequest_RequestHeaders{RequestHeaders: &extprocv3.HttpHeaders{
			Headers: x.reqHead.toHeaderMap(), EndOfStream: !hasBody,
		}},
		ProtocolConfig: &extprocv3.ProtocolConfiguration{
			RequestBodyMode:  extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
			ResponseBodyMode: extprocfilterv3.ProcessingMode_FULL_DUPLEX_STREAMED,
		},
	}
	sendErr := s.send(first)
	x.sentBody = hasBody
	if !hasBody {
		return sendErr
	}
	buf := make([]byte, g.opts.ChunkSize)
	var total int64
	for {
		n, rerr := io.ReadFull(x.r.Body, buf)
		eof := errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF)
		if rerr != nil && !eof {
			return fmt.Errorf("reading the client body: %w", rerr)
		}
		total += int64(n)
		if total > g.opts.MaxRequestBytes {
			return errTooLarge
		}
		x.orig = append(x.orig, buf[:n]...)
		// After a send failure keep reading: fail-open needs the whole body.
		if sendErr == nil && (n > 0 || eof) {
			chunk := append([]byte(nil), buf[:n]...)
			sendErr = s.send(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{
				RequestBody: &extprocv3.HttpBody{Body: chunk, EndOfStream: eof},
			}})
		}
		if eof {
			return sendErr
		}
	}
}

var errTooLarge = errors.New("request body too large")

// awaitRouting reads the EPP's request-phase replies: the headers reply (mutations,
// destination), then the streamed body. done=true means an ImmediateResponse was written.
func (g *Gateway) awaitRouting(ctx context.Context, s *session, x *exchange) (done bool, err error) {
	gotHeaders, bodyDone := false, !x.sentBody
	var body bytes.Buffer
	streamed := false
	for !gotHeaders || !bodyDone {
		m, err := s.next(ctx, armedNow)
		if err != nil {
			return false, err
		}
		mergeMetadata(x.dynMeta, m.GetDynamicMetadata())
		switch v := m.Response.(type) {
		case *extprocv3.ProcessingResponse_ImmediateResponse:
			g.writeImmediate(x, v.ImmediateResponse)
			return true, nil
		case *extprocv3.ProcessingResponse_RequestHeaders:
			cr := v.RequestHeaders.GetResponse()
			x.reqHead.apply(cr.GetHeaderMutation())
			if bm := cr.GetBodyMutation(); bm != nil && cr.GetStatus() == extprocv3.CommonResponse_CONTINUE_AND_REPLACE {
				x.body, bodyDone, _ = applyBodyMutation(bm, x.orig)
				body.Write(x.body)
			}
			gotHeaders = true
		case *extprocv3.ProcessingResponse_RequestBody:
			if !gotHeaders {
				return false, eppErr("request body reply before the request headers reply")
			}
			cr := v.RequestBody.GetResponse()
			x.reqHead.apply(cr.GetHeaderMutation())
			var chunk []byte
			chunk, bodyDone, streamed = applyBodyMutation(cr.GetBodyMutation(), x.orig)
			if streamed {
				body.Write(chunk)
			} else {
				body.Reset()
				body.Write(chunk)
			}
		case *extprocv3.ProcessingResponse_RequestTrailers:
		default:
			return false, eppErr("unexpected reply %T in the request phase", m.Response)
		}
	}
	x.body = body.Bytes()
	return false, nil
}

// applyBodyMutation interprets one body reply. Streamed frames return their chunk (to
// append); a whole-body replacement or a clear returns the new body; a reply without a
// mutation keeps the original body.
func applyBodyMutation(bm *extprocv3.BodyMutation, orig []byte) (chunk []byte, done, streamed bool) {
	switch mm := bm.GetMutation().(type) {
	case *extprocv3.BodyMutation_StreamedResponse:
		return mm.StreamedResponse.GetBody(), mm.StreamedResponse.GetEndOfStream(), true
	case *extprocv3.BodyMutation_Body:
		return mm.Body, true, false
	case *extprocv3.BodyMutation_ClearBody:
		return nil, true, false
	default:
		return orig, true, false
	}
}

// armedNow is a closed channel: the message timeout runs from the start of the wait.
var armedNow = func() <-chan struct{} { c := make(chan struct{}); close(c); return c }()

func mergeMetadata(dst map[string]any, st *structpb.Struct) {
	for k, v := range st.AsMap() {
		if sub, ok := v.(map[string]any); ok {
			if old, ok := dst[k].(map[string]any); ok {
				for kk, vv := range sub {
					old[kk] = vv
				}
				continue
			}
		}
		dst[k] = v
	}
}

// destinations returns the endpoints to try in order: the envoy.lb dynamic metadata wins
// (Envoy's original-destination cluster reads it), the header is the fallback.
func destinations(x *exchange) []string {
	raw := ""
	if lb, ok := x.dynMeta[LBMetadataNamespace].(map[string]any); ok {
		raw, _ = lb[DestinationHeader].(string)
	}
	if raw == "" {
		raw = x.reqHead.get(DestinationHeader)
	}
	var out []string
	for _, d := range strings.Split(raw, ",") {
		if d = strings.TrimSpace(d); d != "" {
			out = append(out, d)
		}
	}
	return out
}

func (g *Gateway) writeImmediate(x *exchange, ir *extprocv3.ImmediateResponse) {
	code := int(ir.GetStatus().GetCode())
	if code < 100 || code > 999 {
		code = http.StatusOK // Envoy's default when the status is unset
	}
	hs := newHeaderSet(nil, nil)
	hs.apply(ir.GetHeaders())
	for k, vs := range hs.h {
		for _, v := range vs {
			x.w.Header().Add(k, v)
		}
	}
	x.w.Header().Set("Content-Length", strconv.Itoa(len(ir.GetBody())))
	x.w.WriteHeader(code)
	x.wrote, x.status = true, code
	_, _ = x.w.Write(ir.GetBody())
	g.log.V(1).Info("immediate response from the EPP", "status", code, "details", ir.GetDetails())
}

// lbServed is the metadata_context the proxy reports on the response path.
func lbServed(endpoint string) *corev3.Metadata {
	st, _ := structpb.NewStruct(map[string]any{ServedMetadataKey: endpoint})
	return &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{LBMetadataNamespace: st}}
}

// validDestination accepts only host:port values; anything else from the EPP is a bug there.
func validDestination(d string) bool {
	_, err := protocol.ParseHostPort(d)
	return err == nil
}
