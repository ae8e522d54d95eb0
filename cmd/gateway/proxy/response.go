package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"

	"github.com/pdgate/pdgate/cmd/gateway/extprocclient"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

var (
	errNoDestination = errors.New("the endpoint picker named no valid destination")
	errNoEndpoint    = errors.New("no listed endpoint accepted a connection")
)

type upstreamError struct {
	endpoint string
	err      error
}

func (e *upstreamError) Error() string { return fmt.Sprintf("upstream %s: %v", e.endpoint, e.err) }
func (e *upstreamError) Unwrap() error { return e.err }

// forward sends the (mutated) request to the listed endpoints in order; a failed connect
// falls through to the next one, as Envoy's original-destination fallbacks do.
func (g *Gateway) forward(ctx context.Context, x *exchange) (*http.Response, string, error) {
	dests := destinations(x)
	if len(dests) == 0 {
		return nil, "", errNoDestination
	}
	var lastErr error
	tried := 0
	for _, d := range dests {
		if !validDestination(d) {
			g.log.Info("ignoring a malformed destination from the EPP", "destination", d)
			continue
		}
		tried++
		req, err := upstreamRequest(ctx, d, x.reqHead, x.body)
		if err != nil {
			return nil, "", fmt.Errorf("building the upstream request: %w", err)
		}
		x.sending()
		resp, err := g.transport.RoundTrip(req)
		if err == nil {
			return resp, d, nil
		}
		var op *net.OpError
		if errors.As(err, &op) && op.Op == "dial" {
			g.metrics.fallthroughs.Inc()
			g.log.V(1).Info("upstream connect failed, trying the next endpoint", "endpoint", d, "error", err.Error())
			lastErr = err
			continue
		}
		return nil, "", &upstreamError{endpoint: d, err: err}
	}
	if tried == 0 {
		return nil, "", errNoDestination
	}
	return nil, "", fmt.Errorf("%w (%d tried): %v", errNoEndpoint, tried, lastErr)
}

func upstreamRequest(ctx context.Context, endpoint string, head *headerSet, body []byte) (*http.Request, error) {
	var rd io.Reader = http.NoBody
	if len(body) > 0 {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, head.pseudo[":method"], "http://"+endpoint+head.pseudo[":path"], rd)
	if err != nil {
		return nil, err
	}
	req.Header = head.h.Clone()
	req.Header.Del("Content-Length")
	stripHopByHop(req.Header)
	req.Host = head.pseudo[":authority"]
	return req, nil
}

// relayResponse sends the upstream's response through the EPP: headers (with the served
// endpoint in metadata_context), then the body chunk by chunk; what the EPP returns goes to
// the client, flushed per chunk so SSE streams stay live.
func (g *Gateway) relayResponse(ctx context.Context, s *extprocclient.Stream, x *exchange, resp *http.Response, served string) error {
	x.upstreamAnswered()
	rh := resp.Header.Clone()
	stripHopByHop(rh)
	head := newHeaderSet(map[string]string{":status": strconv.Itoa(resp.StatusCode)}, rh)
	noBody := resp.ContentLength == 0 || x.r.Method == http.MethodHead ||
		resp.StatusCode == http.StatusNoContent || resp.StatusCode == http.StatusNotModified
	hr, err := s.ResponseHeaders(ctx, head.toHeaderMap(), served, noBody)
	if err != nil {
		return err
	}
	if hr.Immediate != nil {
		g.writeImmediate(x, hr.Immediate)
		return nil
	}
	head.apply(hr.Mutation)
	for k, vs := range head.h {
		x.w.Header()[k] = vs
	}
	x.w.Header().Del("Content-Length") // the EPP may rewrite the body
	x.w.WriteHeader(resp.StatusCode)
	x.wrote, x.status = true, resp.StatusCode
	flush(x.w)
	if noBody {
		return nil
	}
	err = s.RelayResponseBody(ctx, resp.Body, func(b []byte) error {
		x.firstBytes()
		if _, werr := x.w.Write(b); werr != nil {
			return fmt.Errorf("writing to the client: %w", werr)
		}
		flush(x.w)
		return nil
	})
	var re *extprocclient.BodyReadError
	if errors.As(err, &re) {
		return &upstreamError{endpoint: "response body", err: re.Err}
	}
	return err
}

func flush(w http.ResponseWriter) {
	_ = http.NewResponseController(w).Flush()
}

// requestPhaseFailure applies the failure mode to an EPP failure before routing: fail-closed
// returns the error (503); fail-open forwards the client's original request to the default
// backend, as Envoy's failure_mode_allow lets an unprocessed request through.
func (g *Gateway) requestPhaseFailure(ctx context.Context, x *exchange, err error) error {
	if !errors.Is(err, errEPP) {
		return err
	}
	g.metrics.eppFailures.WithLabelValues("request").Inc()
	if g.opts.FailureMode != FailOpen {
		return err
	}
	g.log.Info("EPP failed, failing open to the default backend", "error", err.Error(), "backend", g.opts.DefaultBackend)
	rest, rerr := io.ReadAll(io.LimitReader(x.r.Body, g.opts.MaxRequestBytes-int64(len(x.orig))+1))
	if rerr != nil {
		return fmt.Errorf("reading the client body: %w", rerr)
	}
	x.orig = append(x.orig, rest...)
	if int64(len(x.orig)) > g.opts.MaxRequestBytes {
		return errTooLarge
	}
	req, berr := upstreamRequest(ctx, g.opts.DefaultBackend, requestHead(x.r), x.orig)
	if berr != nil {
		return fmt.Errorf("building the fail-open request: %w", berr)
	}
	resp, uerr := g.transport.RoundTrip(req)
	if uerr != nil {
		return &upstreamError{endpoint: g.opts.DefaultBackend, err: uerr}
	}
	defer resp.Body.Close()
	h := resp.Header.Clone()
	stripHopByHop(h)
	for k, vs := range h {
		x.w.Header()[k] = vs
	}
	x.w.WriteHeader(resp.StatusCode)
	x.wrote, x.status = true, resp.StatusCode
	buf := make([]byte, 32*1024)
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := x.w.Write(buf[:n]); werr != nil {
				return fmt.Errorf("writing to the client: %w", werr)
			}
			flush(x.w)
		}
		if errors.Is(rerr, io.EOF) {
			return nil
		}
		if rerr != nil {
			return &upstreamError{endpoint: g.opts.DefaultBackend, err: rerr}
		}
	}
}

// handleError answers the client with a clear status and an OpenAI-shaped body, or aborts
// the connection when the response had already started.
func (g *Gateway) handleError(ctx context.Context, x *exchange, err error) {
	code, typ := http.StatusBadGateway, "upstream_error"
	var ue *upstreamError
	switch {
	case errors.Is(err, errTooLarge):
		code, typ = http.StatusRequestEntityTooLarge, "invalid_request_error"
	case errors.Is(err, errEPP):
		code, typ = http.StatusServiceUnavailable, "endpoint_picker_unavailable"
		if x.wrote {
			g.metrics.eppFailures.WithLabelValues("response").Inc()
		}
	case errors.Is(err, errNoDestination), errors.Is(err, errNoEndpoint):
		code, typ = http.StatusServiceUnavailable, "no_endpoint"
	case errors.As(err, &ue):
	case errors.Is(err, context.DeadlineExceeded) || errors.Is(ctx.Err(), context.DeadlineExceeded):
		code, typ = http.StatusGatewayTimeout, "timeout"
	case errors.Is(err, context.Canceled):
		x.status = 499 // the client went away; nobody reads an answer
		return
	}
	g.log.Info("request failed", "path", x.r.URL.Path, "status", code, "error", err.Error(), "afterHeaders", x.wrote)
	if x.wrote {
		// The status line is gone; breaking the connection is the only honest signal left.
		panic(http.ErrAbortHandler)
	}
	x.status = code
	protocol.WriteError(x.w, code, typ, "dev gateway: "+err.Error())
}
