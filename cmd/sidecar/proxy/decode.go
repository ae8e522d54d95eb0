package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/sse"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// decodeLeg is one decode leg: what the earlier stages hand the decode stage.
type decodeLeg struct {
	body       []byte        // sent to the local engine
	outcome    string        // x-pdgate-prefill-outcome for sequential dialects
	prefillDur time.Duration // sequential prefill duration (0: none ran)
	prefillEnd time.Time     // sequential prefill response time (KV handoff start)
	// rewriteCached, when set, replaces usage.prompt_tokens_details.cached_tokens.
	rewriteCached *int64
	abort         aborter // drops the decode on the engine when the watchdog fires (SGLang)
	gate          *gate   // concurrent prefill (SGLang, TRT generation_first)
	// probe (shared-storage decode-first): hold the start of the answer and report whether
	// the engine asked for a prefill (finish_reason cache_threshold) instead of streaming it.
	probe bool
}

const probeLimit = 1 << 20

// bufPool recycles the decode copy buffers (one per in-flight request).
var bufPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// decode is the decode stage: it sends the leg to the local engine and streams the answer to
// the client under the watchdog. Engine response headers are held until the first body chunk
// so that a decode that never starts can still be answered with a clean 504. It returns true
// only when a probe found finish_reason cache_threshold (nothing was written to the client
// then).
func (pl *pipeline) decode(o decodeLeg) (needPrefill bool) {
	w, r, rq := pl.w, pl.r, pl.rq
	ctx, cancel := contextWithCancel(r.Context())
	defer cancel()
	wd := newWatchdog(rq.t.firstResponse, rq.t.response, rq.t.streamIdle, rq.stream, cancel)
	defer wd.stop()
	if o.gate != nil {
		o.gate.attach(cancel)
		go func() {
			select {
			case <-o.gate.succeeded:
				wd.start()
			case <-ctx.Done():
			}
		}()
	} else {
		wd.start()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, engineURL(pl.cfg.EngineURL, rq.decoderPort, rq.path, r), bytes.NewReader(o.body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "building decode request: "+err.Error(), protocol.HeaderErrorDecode)
		return false
	}
	req.Header = legHeaders(rq.header, rq.id)
	resp, err := pl.cfg.DecodeClient.Do(req)
	if err != nil {
		pl.decodeFailed(o, wd, err, false)
		return false
	}
	defer func() { _ = resp.Body.Close() }()
	if o.gate != nil && resp.StatusCode/100 == 5 {
		// The decode failed while its prefill leg may still be out: when the prefill failed,
		// the decode's error is its consequence (the KV pull failed) and the client is told
		// the cause. A 4xx is about the request itself and is answered at once.
		if lerr := pl.awaitPrefill(o.gate, "status "+strconv.Itoa(resp.StatusCode)); lerr != nil {
			pl.report.prefillFailure(w, rq, lerr)
			return false
		}
	}

	var (
		committed bool
		out       io.Writer = w
		rw        *sse.Writer
		pending   []byte
	)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	commit := func() bool {
		if o.gate != nil && !o.gate.commit() {
			return false
		}
		pl.writeDecodeHeaders(resp, o)
		committed = true
		if o.rewriteCached != nil && resp.StatusCode/100 == 2 {
			rw = sse.NewWriter(w, flush, *o.rewriteCached, isSSE(resp.Header))
			out = rw
		}
		return true
	}
	probing := o.probe && resp.StatusCode/100 == 2
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			wd.chunk()
			chunk := buf[:n]
			if probing {
				pending = append(pending, chunk...)
				if !probeDecided(pending, isSSE(resp.Header)) {
					chunk = nil
				} else {
					probing = false
					if hasCacheThreshold(pending) {
						return true
					}
					chunk = pending
				}
			}
			if len(chunk) > 0 {
				if !committed && !commit() {
					pl.report.gateFailure(w, rq, o.gate)
					return false
				}
				if _, werr := out.Write(chunk); werr != nil {
					pl.cfg.Metrics.Legs.WithLabelValues("decode", string(pl.cfg.Engine), "client_gone").Inc()
					return false
				}
				if rw == nil {
					flush()
				}
			}
		}
		if rerr == io.EOF {
			if probing && hasCacheThreshold(pending) {
				return true
			}
			if !committed {
				if !commit() {
					pl.report.gateFailure(w, rq, o.gate)
					return false
				}
				if len(pending) > 0 {
					_, _ = out.Write(pending)
				}
			}
			if rw != nil {
				_ = rw.Close()
			}
			flush()
			pl.cfg.Metrics.Legs.WithLabelValues("decode", string(pl.cfg.Engine), outcomeOK).Inc()
			return false
		}
		if rerr != nil {
			pl.decodeFailed(o, wd, rerr, committed)
			return false
		}
	}
}

func (pl *pipeline) writeDecodeHeaders(resp *http.Response, o decodeLeg) {
	w, rq := pl.w, pl.rq
	h := w.Header()
	for k, vs := range resp.Header {
		h[k] = append([]string(nil), vs...)
	}
	for _, k := range hopByHop {
		h.Del(k)
	}
	if o.rewriteCached != nil {
		h.Del("Content-Length")
	}
	outcome, dur, end := o.outcome, o.prefillDur, o.prefillEnd
	if o.gate != nil {
		outcome, dur, end = o.gate.outcome()
	}
	if outcome == outcomeOK && rq.onAlternate {
		outcome = outcomeAlternate
	}
	h.Set(protocol.HeaderPrefillOutcome, outcome)
	if dur > 0 {
		h.Set(protocol.HeaderPrefillDurationMS, strconv.FormatInt(dur.Milliseconds(), 10))
	}
	if !end.IsZero() {
		handoff := time.Since(end)
		if handoff < 0 {
			handoff = 0
		}
		pl.cfg.Metrics.KVHandoffSeconds.WithLabelValues(string(pl.cfg.Engine)).Observe(handoff.Seconds())
	}
	w.WriteHeader(resp.StatusCode)
}

// decodeFailed handles a decode leg that ended with an error.
func (pl *pipeline) decodeFailed(o decodeLeg, wd *watchdog, err error, committed bool) {
	w, r, rq := pl.w, pl.r, pl.rq
	engine := string(pl.cfg.Engine)
	if phase := wd.fired(); phase != "" {
		pl.cfg.Metrics.Watchdog.WithLabelValues(phase, strconv.FormatBool(committed)).Inc()
		pl.cfg.Metrics.Legs.WithLabelValues("decode", engine, "watchdog").Inc()
		rq.log.Info("pd_decode_watchdog fired", "phase", phase, "headersSent", committed)
		pl.cfg.Metrics.aibrixFailure(aibrixDecodeWatchdog, http.StatusGatewayTimeout)
		if o.abort != nil {
			o.abort.abort(rq, "watchdog_"+phase)
		}
		if committed {
			panic(http.ErrAbortHandler) // cut the stream short: the client must not see a clean end
		}
		verb := "start"
		if phase != phaseFirst {
			verb = "finish"
		}
		writeError(w, http.StatusGatewayTimeout, fmt.Sprintf("decode engine did not %s responding within the %s timeout", verb, phase),
			protocol.HeaderErrorDecode)
		return
	}
	if o.gate != nil {
		if !committed && r.Context().Err() == nil {
			pl.awaitPrefill(o.gate, "transport: "+truncate(err.Error(), 128))
		}
		if lerr := o.gate.failure(); lerr != nil {
			if committed {
				panic(http.ErrAbortHandler)
			}
			pl.report.prefillFailure(w, rq, lerr)
			return
		}
	}
	if r.Context().Err() != nil {
		pl.cfg.Metrics.Legs.WithLabelValues("decode", engine, "client_gone").Inc()
		return
	}
	pl.cfg.Metrics.Legs.WithLabelValues("decode", engine, classTransport).Inc()
	rq.log.Info("decode leg failed", "err", err.Error(), "headersSent", committed)
	if committed {
		panic(http.ErrAbortHandler)
	}
	if isConnRefused(err) {
		writeError(w, http.StatusServiceUnavailable, "the decode engine is not ready (connection refused)", protocol.HeaderErrorDecode)
		return
	}
	writeError(w, http.StatusBadGateway, "decode leg failed: "+truncate(err.Error(), 256), protocol.HeaderErrorDecode)
}

// awaitPrefill waits, for a decode leg that failed before answering, until its concurrent
// prefill leg's outcome is known (bounded by the leg's timeout and the client), and returns
// the prefill failure if there was one.
func (pl *pipeline) awaitPrefill(g *gate, decodeErr string) *legError {
	r, rq := pl.r, pl.rq
	select {
	case <-g.finished:
	default:
		rq.log.V(1).Info("decode failed while the prefill leg is still out; waiting for the prefill outcome", "decode", decodeErr)
		if !g.await(r.Context(), rq.t.prefill) {
			rq.log.Info("prefill outcome unknown when the decode failed; answering the decode's error", "decode", decodeErr,
				"clientGone", r.Context().Err() != nil)
		}
	}
	return g.failure()
}

func isSSE(h http.Header) bool {
	return strings.HasPrefix(strings.ToLower(h.Get("Content-Type")), "text/event-stream")
}

// probeDecided: a JSON answer is judged when complete (EOF handles that); a stream after two
// events or probeLimit bytes.
func probeDecided(b []byte, stream bool) bool {
	if len(b) >= probeLimit {
		return true
	}
	return stream && bytes.Count(b, []byte("\n\n")) >= 2
}

func hasCacheThreshold(b []byte) bool {
	return bytes.Contains(b, []byte(`"finish_reason":"cache_threshold"`)) ||
		bytes.Contains(b, []byte(`"finish_reason": "cache_threshold"`))
}
