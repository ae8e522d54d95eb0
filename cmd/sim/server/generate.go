package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/pdgate/pdgate/cmd/sim/batching"
	"github.com/pdgate/pdgate/cmd/sim/kvcache"
)

// exchange is one generation request in flight.
type exchange struct {
	in        *Instance
	w         http.ResponseWriter
	ctx       context.Context
	req       *simRequest
	l         leg
	f         faults
	arrival   time.Time
	trace     engineTrace
	meta      respMeta
	out       output
	s         *sse // non-nil once the 200 and SSE headers are out
	prefilled bool
	extra     map[string]any // produce-leg fields of a non-streaming answer
	choice    map[string]any
}

func (in *Instance) handleGenerate(api string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		arrival, wallArrival := in.clock.Now(), time.Now()
		f, err := in.faultsFor(r)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", err.Error())
			return
		}
		if f.status > 0 {
			writeError(w, f.status, "fault", errType(f.status), fmt.Sprintf("injected fault: HTTP %d", f.status))
			return
		}
		if f.drop {
			dropConnection(w)
			return
		}
		raw, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "cannot read body: "+err.Error())
			return
		}
		req, err := parseRequest(api, raw, in.prof.Encoder.TokensPerItem)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", err.Error())
			return
		}
		if req.model != "" && req.model != in.opts.Model {
			writeError(w, http.StatusNotFound, "bad-request", "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.model))
			return
		}
		seq := in.reqSeq.Add(1)
		prefix := map[string]string{apiChat: "chatcmpl-", apiCompletions: "cmpl-", apiResponses: "resp_"}[api]
		meta := respMeta{api: api, id: fmt.Sprintf("%s%x%08x", prefix, in.opts.Port, seq), model: in.opts.Model, created: arrival.Unix()}
		if in.opts.Role == RoleEncode {
			in.serveEncode(w, r.Context(), req, meta)
			return
		}
		l, err := in.parseLeg(req)
		if err != nil {
			writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", err.Error())
			return
		}
		ctx, cancel := context.WithCancelCause(r.Context())
		defer cancel(nil)
		if in.opts.Dialect == DialectSGLang {
			rid := l.rid
			if rid == "" {
				rid = meta.id
			}
			defer in.trackRID(rid, cancel)()
		}
		x := &exchange{in: in, w: w, ctx: ctx, req: req, l: l, f: f, arrival: arrival, meta: meta, trace: in.startEngineTrace(r, wallArrival)}
		x.run()
	}
}

func (x *exchange) run() {
	in, req, prof := x.in, x.req, x.in.prof
	prompt := len(req.tokens)
	if prompt >= prof.MaxModelLen {
		x.fail(badf("This model's maximum context length is %d tokens. However, you requested %d tokens in the prompt.", prof.MaxModelLen, prompt))
		return
	}
	x.out = newOutput(in.opts.Seed, req.promptHash, req.maxTokens, prof.MeanOutputTokens, prof.MaxModelLen-prompt)
	hashes := kvcache.BlockHashes(req.tokens, prof.BlockSize)
	if req.stream && x.l.kind == legConsume && in.opts.Dialect == DialectSGLang {
		// SGLang answers 200 before the KV arrives; its chat stream's first chunk (the role)
		// goes out with the first token, so only the headers are sent now
		x.startStream()
		x.s.flushHeaders()
	}

	cached := 0
	if x.l.kind == legConsume {
		e, err := in.pullKV(x.ctx, x.l)
		if err == nil {
			err = x.checkPulled(e)
		}
		if err == nil && x.f.wrongRank && in.opts.Dialect == DialectSGLang {
			err = &pullError{http.StatusBadGateway, fmt.Sprintf("bootstrap room %s is not on the prefill data-parallel rank asked", x.l.id)}
		}
		if err != nil {
			in.m.handoffs.WithLabelValues("failed").Inc()
			x.fail(err)
			return
		}
		in.m.handoffs.WithLabelValues("pulled").Inc()
		cached = x.arrived(e, prompt)
		pulled := in.clock.Now()
		if !in.sleep(x.ctx, prof.KVTransferTime(cached)) {
			x.fail(x.ctxErr())
			return
		}
		x.trace.transferred(pulled, in.clock.Now())
	} else {
		hit := in.cache.Match(hashes) * prof.BlockSize
		load := 0
		if in.storage != nil {
			if stored := in.storage.match(hashes) * prof.BlockSize; stored > hit {
				load, hit = stored-hit, stored
			}
		}
		hit = min(hit, prompt)
		if x.l.hasThreshold && x.l.threshold > 0 && float64(hit)/float64(prompt) < x.l.threshold {
			x.cacheThreshold(hit)
			return
		}
		if load > 0 && !in.sleep(x.ctx, prof.KVTransferTime(load)) {
			x.fail(x.ctxErr())
			return
		}
		cached = min(hit, prompt-1) // the last prompt token is always computed
	}
	if cached > 0 {
		in.m.prefixHits.Add(float64(cached))
	}
	var extra time.Duration
	if cached < prompt && len(req.mmItems) > 0 {
		extra = prof.Encode(in.ec.missing(req.mmItems))
	}
	if x.f.prefillSlow > 0 && x.l.kind != legConsume && !in.sleep(x.ctx, x.f.prefillSlow) {
		x.fail(x.ctxErr())
		return
	}
	sr := &batching.Request{ID: x.meta.id, PromptTokens: prompt, CachedTokens: cached, OutputTokens: len(x.out.ids), ExtraPrefill: extra}
	if err := in.sched.Submit(sr); err != nil {
		x.fail(err)
		return
	}
	stop := context.AfterFunc(x.ctx, sr.Cancel)
	defer stop()
	if req.stream {
		x.startStream()
	}
	x.loop(sr, hashes, cached)
}

func (x *exchange) checkPulled(e kvEntry) error {
	if e.PromptHash != x.req.promptHash {
		return &pullError{http.StatusConflict, fmt.Sprintf("KV handoff %q holds the KV of a different prompt", x.l.id)}
	}
	if len(x.l.firstGen) > 0 && x.l.firstGen[0] != e.FirstToken {
		return &pullError{http.StatusConflict, fmt.Sprintf("first_gen_tokens %v do not match the context leg's first token %d", x.l.firstGen, e.FirstToken)}
	}
	if x.l.rank != nil && *x.l.rank != e.Rank && x.in.opts.Dialect != DialectVLLM {
		// TensorRT-LLM reads from the context rank named; it has no recompute fallback.
		return &pullError{http.StatusBadGateway, fmt.Sprintf("KV handoff %q is on context data-parallel rank %d, not %d", x.l.id, e.Rank, *x.l.rank)}
	}
	return nil
}

// arrived is how many prompt tokens of pulled KV the decode holds (and reports cached): all
// of them, but none when vLLM was told to read from another rank (its recompute policy
// recomputes a failed read) and the first half of the blocks under the partial-kv fault.
func (x *exchange) arrived(e kvEntry, prompt int) int {
	switch {
	case x.l.rank != nil && *x.l.rank != e.Rank:
		return 0
	case x.f.partialKV:
		bs := x.in.prof.BlockSize
		return prompt / 2 / bs * bs
	}
	return prompt
}

func (x *exchange) startStream() {
	if x.s != nil {
		return
	}
	x.s = newSSE(x.w, x.meta)
	x.s.header()
	x.s.start() // buffered: it goes out with the first token (one write instead of two)
}

func (x *exchange) loop(sr *batching.Request, hashes []uint64, cached int) {
	sent := 0
	for {
		select {
		case <-sr.Notify():
		case <-x.ctx.Done():
			x.fail(x.ctxErr())
			return
		}
		p := sr.Progress()
		if !x.prefilled && (p.Generated > 0 || (p.Done && p.Err == nil)) {
			x.prefilled = true
			if err := x.afterPrefill(sr, hashes); err != nil {
				x.fail(err)
				return
			}
		}
		if p.Done && p.Err != nil {
			x.fail(p.Err)
			return
		}
		visible := p.Generated
		if x.f.hangFirst {
			visible = 0
		}
		if x.f.stallAfter > 0 && visible > x.f.stallAfter {
			visible = x.f.stallAfter
		}
		if x.s != nil {
			if x.f.dropAfter > 0 && visible >= x.f.dropAfter {
				x.writeTokens(sent, x.f.dropAfter)
				x.s.flush()
				dropConnection(x.w)
				return
			}
			if visible > sent {
				x.writeTokens(sent, visible)
				sent = visible
				x.s.flush()
			}
		}
		if visible < p.Generated || (x.f.hangFirst && p.Done) {
			x.hang(sent)
			return
		}
		if !p.Done {
			continue
		}
		u := newUsage(len(x.req.tokens), p.Generated, cached)
		x.in.m.requestDone(x.arrival, p, x.l.kind == legConsume)
		x.engineSpan(p)
		if x.s != nil {
			x.s.finish(x.out.finishReason(), x.out.text(0, p.Generated), u, x.req.includeUsage)
			return
		}
		writeJSON(x.w, http.StatusOK, fullBody(x.meta, x.out.text(0, p.Generated), x.out.finishReason(), u, x.extra, x.choice))
		return
	}
}

func (x *exchange) writeTokens(from, to int) {
	for _, id := range x.out.ids[from:to] {
		x.s.token(id)
	}
}

// afterPrefill runs once the prompt's KV exists here: fill the caches, then publish (or
// fail) the handoff of a prefill leg.
func (x *exchange) afterPrefill(sr *batching.Request, hashes []uint64) error {
	in := x.in
	in.cacheInsert(hashes, x.req.tokens)
	if in.storage != nil {
		if err := in.storage.store(hashes); err != nil {
			in.log.Error(err, "shared storage")
		}
	}
	race := x.f.decodeRace && x.l.kind == legProduce // a decode prefilling by itself is not raced
	if x.f.prefillFail || x.f.prefillAbort || race {
		sr.Cancel()
		if x.l.kind == legProduce && x.l.id != "" {
			in.store.fail(x.l.id, "injected prefill failure")
		}
		switch {
		case x.f.prefillAbort:
			return errPrefillAbortFault
		case race:
			in.sleep(x.ctx, raceDelay) // the waiting decode answers its error first
		}
		return errPrefillFault
	}
	if x.l.kind != legProduce {
		return nil
	}
	if x.f.kvDropped {
		if x.l.id != "" {
			in.store.fail(x.l.id, "the prefill leg's transfer metadata was dropped")
		}
		return nil // an answer without handoff fields
	}
	if x.l.id == "" {
		if in.opts.Dialect == DialectTRTLLM {
			// below 2^53 so JSON clients that read numbers as float64 keep it exact
			x.l.id = strconv.FormatUint(1<<42+uint64(in.opts.Port)<<24|in.reqSeq.Add(1)&0xffffff, 10)
		} else {
			x.l.id = "kv-" + x.meta.id
		}
	}
	prompt := len(x.req.tokens)
	nb := (prompt + in.prof.BlockSize - 1) / in.prof.BlockSize
	first := in.blockSeq.Add(int64(nb)) - int64(nb)
	blockIDs := make([]int, nb)
	for i := range blockIDs {
		blockIDs[i] = int(first) + i
	}
	var ft uint32
	if len(x.out.ids) > 0 {
		ft = x.out.ids[0]
	}
	e := kvEntry{ID: x.l.id, Dialect: in.opts.Dialect, EngineID: in.engineID, Tokens: prompt,
		PromptHash: x.req.promptHash, FirstToken: ft, BlockIDs: blockIDs, Rank: in.opts.DataParallelRank}
	if err := in.store.produce(e); err != nil {
		sr.Cancel()
		return err
	}
	in.m.handoffs.WithLabelValues("produced").Inc()
	x.extra, x.choice = in.produceFields(x.l, x.req, x.out, blockIDs, x.f.wrongRank)
	return nil
}

var (
	errPrefillFault      = errors.New("injected fault: prefill failed")
	errPrefillAbortFault = errors.New("injected fault: prefill aborted, answered 200")
)

func (x *exchange) ctxErr() error {
	if c := context.Cause(x.ctx); c != nil {
		return c
	}
	return x.ctx.Err()
}

// hang withholds the rest of the answer until the client leaves (bounded by maxHang).
// hang holds the stream open without another byte. Before the first token only the 200 goes
// out: an engine sends its first chunk (the chat role delta, response.created) with the first
// token, and a watchdog waiting for the first response must see nothing until then.
func (x *exchange) hang(tokensSent int) {
	if x.s != nil {
		if tokensSent == 0 {
			x.s.flushHeaders()
		} else {
			x.s.flush() // the client sees what was streamed so far
		}
	}
	if x.in.sleep(x.ctx, maxHang) {
		panic(http.ErrAbortHandler) // bound reached: cut the connection
	}
}

func (x *exchange) cacheThreshold(hit int) {
	u := newUsage(len(x.req.tokens), 0, hit)
	if x.req.stream {
		x.startStream()
		x.s.finish("cache_threshold", "", u, x.req.includeUsage)
		return
	}
	writeJSON(x.w, http.StatusOK, fullBody(x.meta, "", "cache_threshold", u, nil, nil))
}

// fail ends the request with err, as an error status or, once streaming, an error event.
// abortedFinish is the finish reason of a request that ends with a 200 and no token: "abort"
// when it was aborted (/abort_request), "length" for the prefill-abort fault (SGLang's shape).
func abortedFinish(err error, ctx context.Context) (string, bool) {
	switch {
	case errors.Is(err, errPrefillAbortFault):
		return "length", true
	case errors.Is(err, errAborted), errors.Is(context.Cause(ctx), errAborted):
		return "abort", true
	}
	return "", false
}

func (x *exchange) fail(err error) {
	if x.l.kind == legProduce && !x.prefilled && x.l.id != "" {
		x.in.store.fail(x.l.id, err.Error())
	}
	if finish, ok := abortedFinish(err, x.ctx); ok {
		u := newUsage(len(x.req.tokens), 0, 0)
		if x.s != nil {
			x.s.finish(finish, "", u, x.req.includeUsage)
		} else {
			writeJSON(x.w, http.StatusOK, fullBody(x.meta, "", finish, u, nil, nil))
		}
		return
	}
	if x.ctx.Err() != nil {
		return // the client is gone
	}
	code, kind := http.StatusInternalServerError, "fault"
	var br *badRequest
	var pe *pullError
	switch {
	case errors.As(err, &br):
		code, kind = http.StatusBadRequest, "bad-request"
	case errors.As(err, &pe):
		code, kind = pe.status, "kv-handoff"
	case errors.Is(err, batching.ErrKVFull), errors.Is(err, batching.ErrClosed):
		code, kind = http.StatusServiceUnavailable, "kv-full"
	case errors.Is(err, batching.ErrTooLarge):
		code, kind = http.StatusBadRequest, "bad-request"
	}
	msg := err.Error()
	if pe != nil {
		msg = pe.msg
	}
	x.in.log.V(1).Info("request failed", "id", x.meta.id, "leg", x.l.kind, "handoff", x.l.id, "status", code, "error", msg)
	if x.s != nil {
		x.s.errorEvent(code, errType(code), msg)
		return
	}
	writeError(x.w, code, kind, errType(code), msg)
}

// serveEncode is the encode role: encode the request's one multimodal item into the EC cache.
func (in *Instance) serveEncode(w http.ResponseWriter, ctx context.Context, req *simRequest, meta respMeta) {
	if meta.api != apiChat {
		writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "an encoder serves /v1/chat/completions only")
		return
	}
	if len(req.mmItems) != 1 {
		writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError",
			fmt.Sprintf("an encoder request carries exactly one multimodal item, got %d", len(req.mmItems)))
		return
	}
	if req.stream {
		writeError(w, http.StatusBadRequest, "bad-request", "BadRequestError", "encoder requests must not stream")
		return
	}
	if !in.ec.has(req.mmItems[0]) && !in.sleep(ctx, in.prof.Encode(1)) {
		return
	}
	if err := in.ec.put(req.mmItems[0]); err != nil {
		writeError(w, http.StatusInternalServerError, "fault", "InternalServerError", "EC cache: "+err.Error())
		return
	}
	out := newOutput(in.opts.Seed, req.promptHash, 1, in.prof.MeanOutputTokens, 1)
	in.m.success.Inc()
	writeJSON(w, http.StatusOK, fullBody(meta, out.text(0, 1), "length", newUsage(len(req.tokens), 1, 0), nil, nil))
}
