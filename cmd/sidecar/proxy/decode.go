package proxy

import (
	"bytes"
	"encoding/json"
	"errors"
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
	// expect is what the sequential prefill produced; checkGate: check against what the
	// concurrent prefill's answer says (gate). The decode's answer must agree (checks.go).
	expect    handoffExpect
	checkGate bool
	// cause names why a fallback-local decode got no KV (x-error-pd-cause on its answer).
	cause string
}

// checkError is a decode answer that failed a handoff check.
type checkError struct{ cause, msg string }

func (e *checkError) Error() string { return e.cause + ": " + e.msg }

// checked reports whether the leg's answer is checked against its prefill's.
func (o *decodeLeg) checked() bool { return o.expect.prompt > 0 || (o.gate != nil && o.checkGate) }

// expectation is what the decode's answer must agree with: the sequential prefill's answer,
// or the concurrent prefill's once known. The decode's usage comes at its end, long after
// the prefill answered; should it not have, it is waited for (within the leg's deadline,
// while the client waits).
func (pl *pipeline) expectation(o *decodeLeg) handoffExpect {
	if o.gate == nil {
		return o.expect
	}
	o.gate.await(pl.r.Context(), pl.rq.t.prefill)
	return o.gate.expectation()
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
	dropUsage := false
	if o.checked() {
		o.body, dropUsage = askUsage(rq, o.body)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, engineURL(pl.cfg.EngineURL, rq.decoderPort, rq.path, r), bytes.NewReader(o.body))
	if err != nil {
		writeError(w, http.StatusInternalServerError, "building decode request: "+err.Error(), protocol.HeaderErrorDecode)
		return false
	}
	req.Header = legHeaders(rq.header, rq.id)
	rq.tl.decodeSent = time.Now()
	sctx, span := pl.legSpan(ctx, SpanDecode, PhaseDecodeFirstChunk, rq.tl.decodeSent)
	pl.injectLeg(sctx, req.Header)
	var firstByte time.Time
	defer func() {
		if firstByte.IsZero() {
			endLegSpan(span, time.Now(), "no_first_chunk")
		}
	}()
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
	ok2xx := resp.StatusCode/100 == 2
	checking := ok2xx && o.checked()
	// A checked JSON answer is held whole (it is one document: the client can use none of it
	// before the end) and checked before its headers go out.
	holding := checking && !isSSE(resp.Header)
	flush := func() {}
	if f, ok := w.(http.Flusher); ok {
		flush = f.Flush
	}
	commit := func() bool {
		if o.gate != nil && !o.gate.commit() {
			return false
		}
		pl.writeDecodeHeaders(resp, o, firstByte)
		committed = true
		if o.rewriteCached != nil && ok2xx {
			rw = sse.NewWriter(w, flush, *o.rewriteCached, isSSE(resp.Header))
			out = rw
		}
		if checking && isSSE(resp.Header) {
			check := func(line []byte) (bool, error) {
				cause, msg, usageOnly := pl.expectation(&o).checkLine(line)
				if cause != "" {
					return false, &checkError{cause, msg}
				}
				return dropUsage && usageOnly, nil // a usage chunk the client did not ask for
			}
			if rw == nil {
				rw = sse.NewLineChecker(w, flush, check)
				out = rw
			} else {
				rw.CheckLines(check)
			}
		}
		return true
	}
	probing := o.probe && ok2xx
	bp := bufPool.Get().(*[]byte)
	defer bufPool.Put(bp)
	buf := *bp
	for {
		n, rerr := resp.Body.Read(buf)
		if n > 0 {
			wd.chunk()
			if firstByte.IsZero() {
				firstByte = time.Now()
				rq.tl.firstChunk = firstByte
				endLegSpan(span, firstByte, "")
			}
			chunk := buf[:n]
			if holding {
				pending = append(pending, chunk...)
				chunk = nil
				if len(pending) > maxLegResponse {
					holding, chunk, pending = false, pending, nil // too large to hold: passed on unchecked
				}
			}
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
				if !committed && o.gate != nil && isSSE(resp.Header) {
					if code, msg, ok := errorEvent(chunk); ok {
						// SGLang sends its 200 before the KV arrives and a failed pull as the
						// stream's first event: the headers are still held, so the client gets
						// a status; the prefill's failure when it is the cause.
						pl.decodeErrorEvent(o, code, msg)
						return false
					}
				}
				if !committed && !commit() {
					pl.report.gateFailure(w, rq, o.gate)
					return false
				}
				if _, werr := out.Write(chunk); werr != nil {
					pl.writeFailed(o, werr)
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
			if holding {
				if cause, msg := pl.expectation(&o).checkBody(pending); cause != "" {
					pl.checkFailed(o, &checkError{cause, msg}, false)
					return false
				}
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
				if err := rw.Close(); err != nil {
					pl.writeFailed(o, err)
					return false
				}
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

func (pl *pipeline) writeDecodeHeaders(resp *http.Response, o decodeLeg, firstByte time.Time) {
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
	switch {
	case resp.StatusCode >= 500:
		// The engine's own error goes out as it is (no x-error-pd-decode, which marks the
		// sidecar's answers); the cause says whose it is.
		h.Set(headerErrorCause, causeDecodeStatus)
	case o.cause != "":
		h.Set(headerErrorCause, o.cause)
	}
	if dur > 0 {
		h.Set(protocol.HeaderPrefillDurationMS, strconv.FormatInt(dur.Milliseconds(), 10))
	}
	if !end.IsZero() {
		if firstByte.IsZero() {
			firstByte = time.Now()
		}
		handoff := firstByte.Sub(end)
		if handoff < 0 {
			handoff = 0
		}
		pl.cfg.Metrics.KVHandoffSeconds.WithLabelValues(string(pl.cfg.Engine)).Observe(handoff.Seconds())
	}
	if firstByte.IsZero() {
		firstByte = time.Now()
	}
	pl.serverTiming(h, firstByte)
	w.WriteHeader(resp.StatusCode)
}

// errorEvent reads an SSE chunk that opens with an error event ({"error":{"code","message"}}).
func errorEvent(chunk []byte) (code int, msg string, ok bool) {
	line, _, _ := bytes.Cut(bytes.TrimSpace(chunk), []byte("\n"))
	payload, found := bytes.CutPrefix(line, []byte("data:"))
	if !found || !bytes.HasPrefix(bytes.TrimSpace(payload), []byte(`{"error"`)) {
		return 0, "", false
	}
	var ev struct {
		Error struct {
			Code    json.RawMessage `json:"code"`
			Message string          `json:"message"`
		} `json:"error"`
	}
	if json.Unmarshal(bytes.TrimSpace(payload), &ev) != nil {
		return 0, "", false
	}
	code, _ = strconv.Atoi(string(ev.Error.Code))
	if code < 400 || code > 599 {
		code = http.StatusBadGateway
	}
	return code, ev.Error.Message, true
}

// decodeErrorEvent answers a concurrent decode whose stream opened with an error event, as a
// decode that failed with that status: the prefill's failure when the prefill failed (the
// decode's error is its consequence), else the decode's error with x-error-pd-decode.
func (pl *pipeline) decodeErrorEvent(o decodeLeg, code int, msg string) {
	w, rq := pl.w, pl.rq
	if lerr := pl.awaitPrefill(o.gate, "error event "+strconv.Itoa(code)); lerr != nil {
		pl.report.prefillFailure(w, rq, lerr)
		return
	}
	pl.cfg.Metrics.Legs.WithLabelValues("decode", string(pl.cfg.Engine), classHTTP).Inc()
	w.Header().Set(headerErrorCause, causeDecodeStatus)
	writeError(w, code, "decode engine error: "+truncate(msg, 256), protocol.HeaderErrorDecode)
}

// writeFailed handles a write to the client that failed: a handoff check that stopped the
// stream, or a client gone.
func (pl *pipeline) writeFailed(o decodeLeg, err error) {
	var ce *checkError
	if errors.As(err, &ce) {
		pl.checkFailed(o, ce, true)
		return
	}
	pl.cfg.Metrics.Legs.WithLabelValues("decode", string(pl.cfg.Engine), "client_gone").Inc()
}

// checkFailed answers a decode whose answer failed a handoff check: 502 with
// x-error-pd-decode and the cause when nothing was sent yet; once the stream started, an
// SSE error event and a cut stream (no clean end, no [DONE]), so that no client reads it as
// a complete answer. The usage it is checked on comes with the decode's end: nothing is left
// to abort.
func (pl *pipeline) checkFailed(o decodeLeg, ce *checkError, committed bool) {
	w, rq := pl.w, pl.rq
	pl.cfg.Metrics.Legs.WithLabelValues("decode", string(pl.cfg.Engine), ce.cause).Inc()
	rq.log.Info("decode answer failed the handoff check", "cause", ce.cause, "detail", ce.msg, "headersSent", committed)
	if committed {
		_, _ = w.Write(append(append([]byte("data: "), protocol.ErrorBody(http.StatusBadGateway, errorType(http.StatusBadGateway), ce.msg)...), '\n', '\n'))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	}
	w.Header().Set(headerErrorCause, ce.cause)
	writeError(w, http.StatusBadGateway, "decode answer failed the KV handoff check ("+ce.cause+"): "+ce.msg, protocol.HeaderErrorDecode)
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
		w.Header().Set(headerErrorCause, "watchdog_"+phase)
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
	w.Header().Set(headerErrorCause, classTransport)
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
