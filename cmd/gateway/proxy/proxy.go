package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// Names of the EPP protocol (GIE's pkg/epp/metadata): the destination the EPP picked and the
// endpoint the proxy actually served from.
const (
	DestinationHeader   = extprocclient.DestinationHeader
	LBMetadataNamespace = extprocclient.LBNamespace
	ServedMetadataKey   = extprocclient.ServedKey
)

// errEPP marks every failure that comes from the endpoint picker, so the handler can apply
// the failure mode.
var errEPP = extprocclient.ErrEPP

// Gateway is the dev gateway's HTTP handler.
type Gateway struct {
	opts      Options
	client    *extprocclient.Client
	transport *http.Transport
	log       logr.Logger
	metrics   *gatewayMetrics
}

// New builds a gateway around an ext_proc client (the gateway owns no connection of its own).
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
	c := extprocclient.New(extprocclient.Options{MessageTimeout: opts.MessageTimeout, ChunkSize: opts.ChunkSize}, client)
	return &Gateway{opts: opts, client: c, transport: tr, log: opts.Logger, metrics: m}
}

// exchange is one request's state as it crosses the gateway.
type exchange struct {
	w       http.ResponseWriter
	r       *http.Request
	reqHead *headerSet
	orig    []byte // the client's body, kept for fail-open and fall-through
	body    []byte // the body after the EPP's mutations
	routing *extprocclient.Routing
	wrote   bool // response headers went to the client
	status  int
	trace   exchangeTrace
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(r.Context(), g.opts.RequestTimeout)
	defer cancel()
	x := &exchange{w: w, r: r, reqHead: requestHead(r)}
	g.startTrace(x, start)
	defer func() {
		g.metrics.observe(x.status, time.Since(start))
		x.endTrace(g.opts.Tracer)
	}()
	if err := g.serve(ctx, x); err != nil {
		g.handleError(ctx, x, err)
	}
}

func (g *Gateway) serve(ctx context.Context, x *exchange) error {
	s, err := g.client.Open(ctx)
	if err != nil {
		return g.requestPhaseFailure(ctx, x, err)
	}
	defer s.Close()
	sendErr := g.sendRequest(s, x)
	if sendErr != nil && !errors.Is(sendErr, errEPP) {
		return g.requestPhaseFailure(ctx, x, sendErr)
	}
	// Even when a send failed the EPP may have answered first: an EPP that rejects a request
	// (413 for an oversized body, 400 for a malformed one) sends its ImmediateResponse and
	// closes the stream while body frames are still on their way. Envoy honours that answer,
	// so the reply already received wins over the send error.
	rt, err := s.AwaitRouting(ctx)
	if rt != nil && rt.Immediate != nil {
		g.writeImmediate(x, rt.Immediate)
		return nil
	}
	if sendErr != nil {
		return g.requestPhaseFailure(ctx, x, sendErr)
	}
	if err != nil {
		return g.requestPhaseFailure(ctx, x, err)
	}
	for _, m := range rt.HeaderMutations {
		x.reqHead.apply(m)
	}
	x.routing, x.body = rt, rt.Body
	x.routed()
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
func (g *Gateway) sendRequest(s *extprocclient.Stream, x *exchange) error {
	if x.r.ContentLength > g.opts.MaxRequestBytes {
		return errTooLarge
	}
	hasBody := x.r.ContentLength != 0 && x.r.Body != nil && x.r.Body != http.NoBody
	sendErr := s.SendRequestHeaders(x.reqHead.toHeaderMap(), !hasBody)
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
			sendErr = s.SendRequestBody(chunk, eof)
		}
		if eof {
			return sendErr
		}
	}
}

var errTooLarge = errors.New("request body too large")

// destinations returns the endpoints to try in order: the envoy.lb dynamic metadata wins
// (Envoy's original-destination cluster reads it), the header is the fallback.
func destinations(x *exchange) []string {
	raw := x.routing.Metadata(LBMetadataNamespace, DestinationHeader)
	if raw == "" {
		// The header as the mutations left it: the EPP's pick, or what the client sent when
		// the EPP neither set nor removed it (Envoy would forward that too).
		raw = x.reqHead.get(DestinationHeader)
	}
	return extprocclient.SplitEndpoints(raw)
}

func (g *Gateway) writeImmediate(x *exchange, ir *extprocv3.ImmediateResponse) {
	code := extprocclient.ImmediateStatus(ir)
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

// validDestination accepts only host:port values; anything else from the EPP is a bug there.
func validDestination(d string) bool {
	_, err := protocol.ParseHostPort(d)
	return err == nil
}
