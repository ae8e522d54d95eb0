package proxy

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// API is the OpenAI endpoint family of a request.
type API int

// APIs with P/D handling.
const (
	APIChat API = iota
	APICompletions
	APIResponses
)

var apiByPath = map[string]API{
	"/v1/chat/completions": APIChat,
	"/v1/completions":      APICompletions,
	"/v1/responses":        APIResponses,
}

// Proxy is the sidecar's HTTP handler. It reads and checks the routing headers and the body
// of an inference request, then walks it through its pipeline (pipeline.go); every other
// route is reverse-proxied to the engine.
type Proxy struct {
	*stageEnv
	passthrough *httputil.ReverseProxy
}

// New validates cfg and builds the handler.
func New(cfg Config) (*Proxy, error) {
	cfg.withDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	target := cfg.EngineURL
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			port, _ := pr.In.Context().Value(decoderPortKey{}).(string)
			pr.SetURL(engineTarget(target, port))
			pr.Out.Host = pr.In.Host
		},
		Transport:     cfg.DecodeClient.Transport,
		FlushInterval: -1,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			cfg.Log.V(1).Info("passthrough to engine failed", "path", r.URL.Path, "err", err.Error())
			writeError(w, http.StatusBadGateway, "decode engine unreachable", protocol.HeaderErrorDecode)
		},
	}
	return &Proxy{stageEnv: newStageEnv(cfg), passthrough: rp}, nil
}

// decoderPortKey carries a passthrough request's validated x-pdgate-decoder-port to the
// reverse proxy's Rewrite.
type decoderPortKey struct{}

// request is one inference request as the stages and the dialect see it.
type request struct {
	id       string
	path     string
	api      API
	header   http.Header
	raw      []byte
	obj      *jsonbody.Object
	stream   bool
	prefill  *protocol.HostPort
	encoders []protocol.HostPort
	// bootstrapPort, prefillEngine and prefillConnector come from the pdgate extension headers.
	bootstrapPort    string
	prefillEngine    string
	prefillConnector string
	// alternate is a second prefill target of the same roleset for the one retry (nil: retry
	// the same target).
	alternate *protocol.HostPort
	// prefillAsked: the EPP named a prefill target (pdgate_sidecar_prefill_diverted_total
	// counts only such requests); onAlternate: the prefill ran on the alternate.
	prefillAsked, onAlternate bool
	// releaseURL is the EPP's prefill-release callback (x-pdgate-prefill-release), checked;
	// releaseOnce makes the callback fire once however the prefill leg ends.
	releaseURL  string
	releaseOnce sync.Once
	// decoderPort is the engine port of this request's decode leg (x-pdgate-decoder-port,
	// validated): "" keeps --engine-url's port; the host is always --engine-url's.
	decoderPort string
	// t are the request's timeouts (flags + per-profile sidecar knobs).
	t     timeouts
	log   logr.Logger
	start time.Time
	// tl is the request's phase timeline (timeline.go).
	tl timeline
}

// ServeHTTP implements http.Handler.
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	routing := make(map[string]string, len(protocol.RoutingHeaders))
	for _, h := range protocol.RoutingHeaders {
		routing[h] = strings.Join(r.Header.Values(h), ",")
		r.Header.Del(h)
	}
	port := p.decoderPort(routing[protocol.HeaderDecoderPort])
	api, inference := apiByPath[r.URL.Path]
	if !inference || r.Method != http.MethodPost {
		if port != "" {
			r = r.WithContext(context.WithValue(r.Context(), decoderPortKey{}, port))
		}
		p.passthrough.ServeHTTP(w, r)
		return
	}
	p.cfg.Metrics.InFlight.Inc()
	defer p.cfg.Metrics.InFlight.Dec()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			p.cfg.Metrics.Requests.WithLabelValues(string(p.cfg.Engine), "aborted", fmt.Sprint(rec.code())).Inc()
			panic(v)
		}
	}()
	mode := p.handle(rec, r, api, routing, port)
	p.cfg.Metrics.Requests.WithLabelValues(string(p.cfg.Engine), mode, fmt.Sprint(rec.code())).Inc()
}

// handle reads the request's routing headers and body into a request, answering what it must
// refuse, and runs the request's pipeline; it returns the request's mode (for the counter).
func (p *Proxy) handle(w http.ResponseWriter, r *http.Request, api API, routing map[string]string, decoderPort string) (mode string) {
	rq := &request{id: requestID(r.Header), path: r.URL.Path, api: api, header: r.Header, start: time.Now(), decoderPort: decoderPort}
	rq.log = p.cfg.Log.WithValues("requestID", rq.id, "path", rq.path)
	p.startTrace(rq, r)
	defer p.finishTimeline(rq, w)
	rq.bootstrapPort = strings.TrimSpace(routing[protocol.HeaderPrefillerBootstrapPort])
	rq.prefillEngine = strings.TrimSpace(routing[protocol.HeaderPrefillerEngine])
	rq.prefillConnector = strings.TrimSpace(routing[protocol.HeaderPrefillerKVConnector])
	rq.t = timeoutsFor(&p.cfg, rq, strings.TrimSpace(routing[protocol.HeaderSidecarKnobs]))
	if rq.decoderPort == "" {
		rq.decoderPort = p.ranks.fromHeader(routing[protocol.HeaderDataParallelHostPort])
	}

	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, p.cfg.MaxRequestBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body exceeds %d bytes", p.cfg.MaxRequestBytes))
			return "rejected"
		}
		writeError(w, http.StatusBadRequest, "reading request body: "+err.Error())
		return "rejected"
	}
	rq.raw = body

	if v := routing[protocol.HeaderPrefillerHostPort]; strings.TrimSpace(v) != "" {
		rq.prefillAsked = true
		first := strings.Split(v, ",")[0]
		hp, err := protocol.ParseHostPort(first)
		if err != nil {
			rq.log.Info("malformed prefill header", "value", v, "err", err.Error())
			p.report.refusePrefill(w, rq, http.StatusBadRequest, "malformed "+protocol.HeaderPrefillerHostPort+" header", reasonBadHeader)
			return "rejected"
		}
		if !p.cfg.Allow.Allowed(hp) {
			p.cfg.Metrics.AllowlistRejections.WithLabelValues("prefill").Inc()
			rq.log.Info("prefill target refused by the allow-list", "target", hp.String(),
				"client", r.RemoteAddr, "userAgent", r.UserAgent())
			p.report.refusePrefill(w, rq, http.StatusForbidden, "prefill target not allowed", reasonAllowlist)
			return "rejected"
		}
		rq.prefill = &hp
		rq.alternate = p.alternatePrefill(rq, routing[protocol.HeaderPrefillerAlternateHostPort], hp)
		p.release.set(rq, strings.TrimSpace(routing[protocol.HeaderPrefillRelease]))
	}
	if v := routing[protocol.HeaderEncoderHostsPorts]; strings.TrimSpace(v) != "" {
		rq.encoders = p.allowedEncoders(rq, v)
	}

	obj, perr := jsonbody.Parse(body)
	if perr != nil {
		// Refused rather than forwarded: a body Go cannot parse might still parse in the
		// engine (NaN, for one) and carry KV fields the sidecar could not strip.
		writeError(w, http.StatusBadRequest, "request body: "+perr.Error())
		return "rejected"
	}
	rq.obj = obj
	rq.stream, _ = obj.Bool("stream")

	return (&pipeline{stageEnv: p.stageEnv, w: w, r: r, rq: rq}).run()
}

func (p *Proxy) allowedEncoders(rq *request, v string) []protocol.HostPort {
	var out []protocol.HostPort
	for _, item := range strings.Split(v, ",") {
		if strings.TrimSpace(item) == "" {
			continue
		}
		hp, err := protocol.ParseHostPort(item)
		if err != nil {
			rq.log.Info("malformed encoder target dropped", "value", item, "err", err.Error())
			continue
		}
		if !p.cfg.Allow.Allowed(hp) {
			p.cfg.Metrics.AllowlistRejections.WithLabelValues("encode").Inc()
			rq.log.Info("encoder target refused by the allow-list; dropped", "target", hp.String())
			continue
		}
		out = append(out, hp)
	}
	return out
}

// alternatePrefill parses the EPP's alternate prefill target; a malformed or refused one is
// dropped (logged), and the one retry goes to the first target.
func (p *Proxy) alternatePrefill(rq *request, v string, first protocol.HostPort) *protocol.HostPort {
	if strings.TrimSpace(v) == "" {
		return nil
	}
	hp, err := protocol.ParseHostPort(strings.Split(v, ",")[0])
	if err != nil {
		rq.log.Info("malformed alternate prefill header ignored", "value", v, "err", err.Error())
		return nil
	}
	if !p.cfg.Allow.Allowed(hp) {
		p.cfg.Metrics.AllowlistRejections.WithLabelValues("prefill").Inc()
		rq.log.Info("alternate prefill target refused by the allow-list; ignored", "target", hp.String())
		return nil
	}
	if hp == first {
		return nil
	}
	return &hp
}

// decoderPort validates x-pdgate-decoder-port: "" when absent; a decimal port in 1..65535,
// else "" with the value logged and counted (the --engine-url port applies).
func (p *Proxy) decoderPort(v string) string {
	v = strings.TrimSpace(v)
	if v == "" {
		return ""
	}
	n, err := strconv.ParseUint(v, 10, 16)
	if err != nil || n == 0 {
		p.cfg.Metrics.DecoderPortRejections.Inc()
		p.cfg.Log.Info("ignoring invalid "+protocol.HeaderDecoderPort+"; the --engine-url port applies", "value", truncate(v, 64))
		return ""
	}
	return strconv.FormatUint(n, 10)
}

// requestID returns the client's x-request-id when it is sane, else a fresh random id.
func requestID(h http.Header) string {
	if v := h.Get("X-Request-Id"); v != "" && len(v) <= 128 && printable(v) {
		return v
	}
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// statusRecorder remembers the status code for the request counter.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

func (s *statusRecorder) Unwrap() http.ResponseWriter { return s.ResponseWriter }

func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (s *statusRecorder) code() int {
	if s.status == 0 {
		return 499
	}
	return s.status
}
