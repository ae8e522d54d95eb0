package proxy

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// prefill is the prefill stage: it asks the dialect for the request's legs and sends the
// prefill leg, in sequence with the decode or alongside it. It returns the decode leg to send
// (nil when the client has been answered) and a func the handler defers: a concurrent leg's
// context ends with it only when the client went away.
func (pl *pipeline) prefill() (next *decodeLeg, done func()) {
	done = func() {}
	rq := pl.rq
	if rq.prefillEngine != "" && rq.prefillEngine != string(pl.cfg.Engine) {
		return pl.setupFailed(cannotSetUp("prefill pod engine %q does not match decode engine %q", rq.prefillEngine, pl.cfg.Engine)), done
	}
	plan, err := pl.dialect.plan(pl.r.Context(), rq)
	if err != nil {
		return pl.setupFailed(err), done
	}
	if plan.concurrent {
		g := newGate(plan.resetAfterCommit)
		done = pl.startConcurrentPrefill(plan.prefill, g, plan.abort)
		return &decodeLeg{body: plan.decode, gate: g, abort: plan.abort, checkGate: !pl.cfg.uncheckedHandoff}, done
	}
	if plan.probe {
		if !pl.decode(decodeLeg{body: localBody(rq), outcome: outcomeSkipped, probe: true}) {
			pl.report.diverted(rq, outcomeSkipped, reasonCacheHit)
			return nil, done
		}
		rq.log.V(1).Info("decode answered cache_threshold; running prefill")
	}
	resp, dur, lerr := pl.sequentialPrefill(plan.prefill)
	if lerr != nil {
		return pl.prefillFailed(lerr, plan.fallback), done
	}
	end := time.Now()
	body, fallback, cached := plan.reader.decodeBody(rq, resp)
	if fallback != "" {
		pl.report.diverted(rq, outcomeFallback, fallback)
		return &decodeLeg{body: body, outcome: outcomeFallback, cause: fallback, prefillDur: dur, prefillEnd: end, rewriteCached: cached}, done
	}
	next = &decodeLeg{body: body, outcome: outcomeOK, prefillDur: dur, prefillEnd: end, rewriteCached: cached}
	if !plan.unchecked && !pl.cfg.uncheckedHandoff {
		next.expect = expectFrom(resp)
	}
	return next, done
}

// setupFailed answers a request whose legs cannot be set up, before any leg is sent; for a
// prefill leg that cannot be set up the failure policy decides between an error and local
// prefill.
func (pl *pipeline) setupFailed(err error) *decodeLeg {
	w, rq := pl.w, pl.rq
	var se *setupError
	if !errors.As(err, &se) {
		se = &setupError{kind: setupFailed, msg: err.Error()}
	}
	switch se.kind {
	case setupBadBody:
		writeError(w, http.StatusBadRequest, se.msg)
		return nil
	case setupRefused:
		pl.cfg.Metrics.AllowlistRejections.WithLabelValues("prefill").Inc()
		rq.log.Info(se.what+" target refused by the allow-list", "target", se.target.String(), "client", pl.r.RemoteAddr)
		pl.report.refusePrefill(w, rq, http.StatusForbidden, se.what+" target not allowed", reasonAllowlist)
		return nil
	}
	rq.log.Info("prefill leg cannot be set up", "reason", se.msg)
	pl.cfg.Metrics.Legs.WithLabelValues("prefill", string(pl.cfg.Engine), classSetup).Inc()
	if pl.cfg.FailurePolicy == FallbackLocal {
		pl.report.diverted(rq, outcomeFallback, classSetup)
		return &decodeLeg{body: localBody(rq), outcome: outcomeFallback, cause: classSetup}
	}
	pl.report.refusePrefill(w, rq, http.StatusServiceUnavailable, "prefill request failed ("+classSetup+"): "+truncate(se.msg, 256), classSetup)
	return nil
}

func (pl *pipeline) prefillURL() string {
	u := pl.cfg.PrefillScheme + "://" + pl.rq.prefill.String() + pl.rq.path
	if pl.r.URL.RawQuery != "" {
		u += "?" + pl.r.URL.RawQuery
	}
	return u
}

// prefillOnce sends one prefill attempt and parses the JSON object it returns.
func (pl *pipeline) prefillOnce(ctx context.Context, body []byte) (*jsonbody.Object, *legError) {
	hdr := legHeaders(pl.rq.header, pl.rq.id)
	pl.injectLeg(ctx, hdr)
	_, b, lerr := postJSON(ctx, pl.cfg.PrefillClient, pl.prefillURL(), hdr, body)
	if lerr != nil {
		return nil, lerr
	}
	obj, err := jsonbody.Parse(b)
	if err != nil {
		return nil, &legError{class: classBadResponse, err: err}
	}
	if why := prefillIncomplete(obj); why != "" {
		return nil, &legError{class: classIncomplete, err: errors.New(why)}
	}
	return obj, nil
}

// prefillIncomplete says why a 200 prefill answer did not produce its prompt's KV, or "": a
// finish reason of abort or error, or length with no token generated (an aborted prefill that
// still answers 200, SGLang #33507). Handing such a leg to the decode engine would decode on
// missing KV; it fails like any other prefill leg instead (retried once, then the failure
// policy). Fields an engine leaves out say nothing.
func prefillIncomplete(obj *jsonbody.Object) string {
	raw, ok := obj.Raw("choices")
	var choices []struct {
		FinishReason *string `json:"finish_reason"`
	}
	if !ok || json.Unmarshal(raw, &choices) != nil || len(choices) == 0 || choices[0].FinishReason == nil {
		return ""
	}
	switch fr := *choices[0].FinishReason; fr {
	case "abort", "error":
		return "prefill finished with finish_reason " + fr
	case "length":
		var usage struct {
			CompletionTokens *int `json:"completion_tokens"`
		}
		if u, ok := obj.Raw("usage"); ok && json.Unmarshal(u, &usage) == nil && usage.CompletionTokens != nil && *usage.CompletionTokens == 0 {
			return "prefill finished with finish_reason length and no token generated"
		}
	}
	return ""
}

// sequentialPrefill runs the prefill leg of the dialects that wait for it (vLLM, TRT-LLM
// context_first) within one overall deadline. Every policy retries a retryable failure once
// (unless SkipPrefillRetryOnce): on the EPP's alternate prefill pod of the same roleset when
// it named one, else on the same pod; the retry policy adds attempts up to
// PrefillMaxRetries. A prefill that succeeds on the alternate leaves rq.prefill pointing at
// it (the KV is there: SHFS's remote_host must name it) and rq.onAlternate set. When it
// returns, the EPP's prefill-release callback fires.
func (pl *pipeline) sequentialPrefill(body []byte) (*jsonbody.Object, time.Duration, *legError) {
	rq := pl.rq
	defer pl.release.returned(rq) // every way out: the leg's result is known
	start := time.Now()
	rq.tl.prefillStart = start
	ctx, cancel := context.WithTimeout(pl.r.Context(), rq.t.prefill)
	defer cancel()
	ctx, span := pl.legSpan(ctx, SpanPrefill, PhasePrefill, start)
	retries := 0
	if !pl.cfg.SkipPrefillRetryOnce {
		retries = 1
	}
	if pl.cfg.FailurePolicy == Retry && pl.cfg.PrefillMaxRetries > retries {
		retries = pl.cfg.PrefillMaxRetries
	}
	engine := string(pl.cfg.Engine)
	var first *legError
	for i := 0; ; i++ {
		obj, lerr := pl.prefillOnce(ctx, body)
		if lerr == nil {
			rq.tl.prefillEnd = time.Now()
			endLegSpan(span, rq.tl.prefillEnd, "")
			d := rq.tl.prefillEnd.Sub(start)
			pl.cfg.Metrics.Legs.WithLabelValues("prefill", engine, outcomeOK).Inc()
			pl.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeOK).Observe(d.Seconds())
			if rq.onAlternate {
				pl.report.diverted(rq, outcomeAlternate, first.class)
			}
			return obj, d, nil
		}
		if first == nil {
			first = lerr
		}
		pl.cfg.Metrics.Legs.WithLabelValues("prefill", engine, lerr.class).Inc()
		rq.log.Info("prefill attempt failed", "attempt", i+1, "target", rq.prefill.String(), "err", lerr.Error())
		if i >= retries || !lerr.retryable() || ctx.Err() != nil {
			endLegSpan(span, time.Now(), lerr.class)
			pl.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeFailed).Observe(time.Since(start).Seconds())
			return nil, time.Since(start), lerr
		}
		pl.cfg.Metrics.PrefillRetries.WithLabelValues(engine).Inc()
		if i == 0 && rq.alternate != nil {
			// Another pod: no reason to wait before asking it.
			rq.log.Info("retrying the prefill on the EPP's alternate prefill pod", "target", rq.alternate.String())
			rq.prefill, rq.onAlternate = rq.alternate, true
			continue
		}
		t := time.NewTimer(pl.cfg.PrefillRetryBackoff << i)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
		}
	}
}

// prefillFailed applies the failure policy after a sequential prefill leg failed: the decode
// leg of a local fallback (fallback, or the client's body less the KV fields), or nil when
// the client has been answered.
func (pl *pipeline) prefillFailed(lerr *legError, fallback []byte) *decodeLeg {
	w, rq := pl.w, pl.rq
	if pl.r.Context().Err() != nil {
		pl.report.diverted(rq, outcomeFailed, classCanceled)
		return nil // the client is gone; nobody to answer
	}
	if lerr.clientError() {
		pl.report.diverted(rq, outcomeFailed, lerr.class)
		pl.cfg.Metrics.aibrixFailure(aibrixPrefillFailure, lerr.status)
		h := w.Header()
		h.Set("Content-Type", lerr.header.Get("Content-Type"))
		if protocol.IsModelNotFound(lerr.status, lerr.body) {
			// The request's model, not the prefill, is at fault: the engine's own 404 body
			// goes back as a model error, not labelled a failed prefill.
			h.Set(protocol.HeaderErrorCause, protocol.CauseModelNotFound)
		} else {
			h.Set(protocol.HeaderErrorPrefill, "true")
			h.Set(headerErrorCause, lerr.class)
		}
		h.Set(protocol.HeaderPrefillOutcome, outcomeFailed)
		w.WriteHeader(lerr.status)
		_, _ = w.Write(lerr.body)
		return nil
	}
	if pl.cfg.FailurePolicy == FallbackLocal {
		rq.log.Info("prefill failed; decoding with local prefill", "class", lerr.class)
		pl.report.diverted(rq, outcomeFallback, lerr.class)
		if fallback == nil {
			fallback = localBody(rq)
		}
		return &decodeLeg{body: fallback, outcome: outcomeFallback, cause: lerr.class}
	}
	pl.report.prefillFailure(w, rq, lerr)
	return nil
}

// startConcurrentPrefill sends the prefill leg in the background, bounded by the prefill
// deadline but not by the handler: net/http cancels the request context when the handler
// returns, which must not cut a prefill whose response is merely later than the decode
// answer. The returned func, deferred by the handler, cancels the leg only when the client
// went away. abort, when set, drops the decode on the engine when the prefill fails before
// the decode answered.
func (pl *pipeline) startConcurrentPrefill(body []byte, g *gate, abort aborter) (done func()) {
	r, rq := pl.r, pl.rq
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), rq.t.prefill)
	engine := string(pl.cfg.Engine)
	done = func() {
		// Deferred inside the handler: a cancelled request context here means the client left.
		if r.Context().Err() != nil {
			cancel()
		}
	}
	go func() {
		defer cancel()
		start := time.Now()
		ctx, span := pl.legSpan(ctx, SpanPrefill, PhasePrefill, start)
		obj, lerr := pl.prefillOnce(ctx, body)
		end := time.Now()
		pl.release.returned(rq) // the leg's result is known: the EPP's charge may end
		if lerr == nil || !lerr.terminal() {
			endLegSpan(span, end, "")
			pl.cfg.Metrics.PhaseSeconds.WithLabelValues(PhasePrefill).Observe(end.Sub(start).Seconds())
			if lerr != nil {
				rq.log.V(1).Info("prefill answered an unparseable body; KV transfer completed", "err", lerr.Error())
			}
			pl.cfg.Metrics.Legs.WithLabelValues("prefill", engine, outcomeOK).Inc()
			pl.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeOK).Observe(time.Since(start).Seconds())
			g.succeed(expectFrom(obj))
			return
		}
		endLegSpan(span, end, lerr.class)
		pl.cfg.Metrics.Legs.WithLabelValues("prefill", engine, lerr.class).Inc()
		pl.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeFailed).Observe(time.Since(start).Seconds())
		if g.fail(lerr) {
			rq.log.Info("prefill failed before the decode answer; failing the request", "class", lerr.class, "err", lerr.Error())
			if abort != nil {
				abort.abort(rq, "prefill_failure")
			}
			return
		}
		// Headers are out: only the count can tell the operator.
		pl.report.diverted(rq, outcomeFailed, lerr.class)
		rq.log.Info("prefill failed after the decode answer started", "class", lerr.class, "err", lerr.Error())
	}()
	return done
}
