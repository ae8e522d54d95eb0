package proxy

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// ridGen makes SGLang request ids: "<request id>-<8 hex process random><8 hex counter>". The
// fixed 16-hex suffix means no rid is a proper prefix of another (SGLang aborts by rid
// prefix), and ids stay unique per attempt even when the client repeats its request id.
type ridGen struct {
	prefix  string
	counter atomic.Uint32
}

func newRidGen() ridGen {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return ridGen{prefix: hex.EncodeToString(b[:])}
}

func (g *ridGen) next(reqID string) string {
	return fmt.Sprintf("%s-%s%08x", reqID, g.prefix, g.counter.Add(1))
}

func randomRoom() int64 {
	n, err := rand.Int(rand.Reader, big.NewInt(1<<62))
	if err != nil {
		return time.Now().UnixNano() & (1<<62 - 1)
	}
	return n.Int64()
}

// sglangKeys are the fields the SGLang dialect sets.
var sglangKeys = []string{"bootstrap_host", "bootstrap_port", "bootstrap_room", "rid"}

// runSGLang: both legs carry the same bootstrap coordinates and go out concurrently; the
// engines hand KV over through the prefill pod's bootstrap server.
func (p *Proxy) runSGLang(w http.ResponseWriter, r *http.Request, rq *request) {
	if rejectDuplicates(w, rq, sglangKeys...) {
		return
	}
	port := p.cfg.SGLangBootstrapPort
	if rq.bootstrapPort != "" {
		v, err := strconv.Atoi(rq.bootstrapPort)
		if err != nil || v < 1 || v > 65535 {
			p.setupFailure(w, r, rq, fmt.Sprintf("invalid bootstrap port header %q", rq.bootstrapPort))
			return
		}
		// The decode engine connects to host:port itself: a port other than the configured
		// one must pass the allow-list like the prefill target, or a caller could aim the
		// engine at any port of an allowed host.
		if bp := (protocol.HostPort{Host: rq.prefill.Host, Port: v}); v != port && !p.cfg.Allow.Allowed(bp) {
			p.cfg.Metrics.AllowlistRejections.WithLabelValues("prefill").Inc()
			rq.log.Info("bootstrap target refused by the allow-list", "target", bp.String(), "client", r.RemoteAddr)
			p.report.refusePrefill(w, rq, http.StatusForbidden, "bootstrap target not allowed", reasonAllowlist)
			return
		}
		port = v
	}
	rid := p.rids.next(rq.id)
	dec := sanitized(rq.obj)
	// The bare address (no IPv6 brackets): SGLang joins host and port itself.
	_ = dec.Set("bootstrap_host", rq.prefill.Host)
	dec.SetInt("bootstrap_port", int64(port))
	dec.SetInt("bootstrap_room", randomRoom())
	_ = dec.Set("rid", rid)
	pre := dec.Clone()
	applyPrefillControls(pre, rq.api, true)

	g := newGate(false)
	defer p.startConcurrentPrefill(r, rq, pre.Bytes(), g, func() { p.abortSGLang(rq, rid, "prefill_failure") })()
	p.decode(w, r, rq, dec.Bytes(), decodeOpts{gate: g, rid: rid})
}

// startConcurrentPrefill sends the prefill leg in the background, bounded by the prefill
// deadline but not by the handler: net/http cancels the request context when the handler
// returns, which must not cut a prefill whose response is merely later than the decode
// answer. The returned func, deferred by the handler, cancels the leg only when the client
// went away.
func (p *Proxy) startConcurrentPrefill(r *http.Request, rq *request, body []byte, g *gate, onFailBefore func()) (done func()) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), rq.t.prefill)
	engine := string(p.cfg.Engine)
	done = func() {
		// Deferred inside the handler: a cancelled request context here means the client left.
		if r.Context().Err() != nil {
			cancel()
		}
	}
	go func() {
		defer cancel()
		start := time.Now()
		_, lerr := p.prefillOnce(ctx, r, rq, body)
		p.release.returned(rq) // the leg's result is known: the EPP's charge may end
		if lerr == nil || !lerr.terminal() {
			if lerr != nil {
				rq.log.V(1).Info("prefill answered an unparseable body; KV transfer completed", "err", lerr.Error())
			}
			p.cfg.Metrics.Legs.WithLabelValues("prefill", engine, outcomeOK).Inc()
			p.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeOK).Observe(time.Since(start).Seconds())
			g.succeed()
			return
		}
		p.cfg.Metrics.Legs.WithLabelValues("prefill", engine, lerr.class).Inc()
		p.cfg.Metrics.PrefillSeconds.WithLabelValues(engine, outcomeFailed).Observe(time.Since(start).Seconds())
		if g.fail(lerr) {
			rq.log.Info("prefill failed before the decode answer; failing the request", "class", lerr.class, "err", lerr.Error())
			if onFailBefore != nil {
				onFailBefore()
			}
			return
		}
		// Headers are out: only the count can tell the operator.
		p.report.diverted(rq, outcomeFailed, lerr.class)
		rq.log.Info("prefill failed after the decode answer started", "class", lerr.class, "err", lerr.Error())
	}()
	return done
}

// abortSGLang asks the local SGLang engine to drop rid, twice (the engine answers 200 whether
// or not the rid matched, so the second attempt covers a request that was not yet queued).
func (p *Proxy) abortSGLang(rq *request, rid, trigger string) {
	if rq.t.abort == 0 {
		p.cfg.Metrics.Aborts.WithLabelValues(trigger, "skipped_disabled").Inc()
		return
	}
	body, _ := json.Marshal(map[string]string{"rid": rid})
	go func() {
		for attempt := 0; attempt < 2; attempt++ {
			if attempt == 1 {
				if rq.t.abortRetry == 0 {
					return
				}
				time.Sleep(rq.t.abortRetry)
			}
			ctx, cancel := context.WithTimeout(context.Background(), rq.t.abort)
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, engineURL(p.cfg.EngineURL, rq.decoderPort, "/abort_request", nil), bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			result := "ok"
			resp, err := p.cfg.DecodeClient.Do(req)
			if err != nil {
				result = "error"
			} else {
				_ = resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					result = "error"
				}
			}
			cancel()
			p.cfg.Metrics.Aborts.WithLabelValues(trigger, result).Inc()
			rq.log.V(1).Info("abort_request sent", "rid", rid, "trigger", trigger, "attempt", attempt+1, "result", result)
		}
	}()
}
