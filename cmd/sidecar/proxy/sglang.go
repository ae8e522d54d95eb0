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
	"net/url"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/allowlist"
	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
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

// sglangDialect is SGLang's wire dialect: both legs carry the same bootstrap coordinates and
// go out concurrently; the engines hand KV over through the prefill pod's bootstrap server.
type sglangDialect struct {
	rids ridGen
	// bootstrapPort is --sglang-bootstrap-port, used when the EPP sends no bootstrap port.
	bootstrapPort int
	allow         allowlist.Checker
	// client, engineURL and metrics send and count the /abort_request calls.
	client    *http.Client
	engineURL *url.URL
	metrics   *Metrics
}

func (d *sglangDialect) plan(_ context.Context, rq *request) (*legPlan, error) {
	if err := duplicateKey(rq, sglangKeys...); err != nil {
		return nil, err
	}
	port := d.bootstrapPort
	if rq.bootstrapPort != "" {
		v, err := strconv.Atoi(rq.bootstrapPort)
		if err != nil || v < 1 || v > 65535 {
			return nil, cannotSetUp("invalid bootstrap port header %q", rq.bootstrapPort)
		}
		// The decode engine connects to host:port itself: a port other than the configured
		// one must pass the allow-list like the prefill target, or a caller could aim the
		// engine at any port of an allowed host.
		if bp := (protocol.HostPort{Host: rq.prefill.Host, Port: v}); v != port && !d.allow.Allowed(bp) {
			return nil, &setupError{kind: setupRefused, what: "bootstrap", target: bp}
		}
		port = v
	}
	rid := d.rids.next(rq.id)
	dec := sanitized(rq.obj)
	// The bare address (no IPv6 brackets): SGLang joins host and port itself.
	_ = dec.Set("bootstrap_host", rq.prefill.Host)
	dec.SetInt("bootstrap_port", int64(port))
	dec.SetInt("bootstrap_room", randomRoom())
	_ = dec.Set("rid", rid)
	pre := dec.Clone()
	applyPrefillControls(pre, rq.api, true)
	return &legPlan{prefill: pre.Bytes(), concurrent: true, decode: dec.Bytes(), abort: sglangAbort{d: d, rid: rid}}, nil
}

// producerParams: an SGLang prefill leg carries consumer coordinates only (bootstrap_*),
// which are never kept.
func (*sglangDialect) producerParams(*jsonbody.Object) (string, *jsonbody.Object) { return "", nil }

// sglangAbort drops one rid on the local SGLang engine.
type sglangAbort struct {
	d   *sglangDialect
	rid string
}

// abort asks the local SGLang engine to drop the rid, twice (the engine answers 200 whether
// or not the rid matched, so the second attempt covers a request that was not yet queued).
func (a sglangAbort) abort(rq *request, trigger string) {
	d, rid := a.d, a.rid
	if rq.t.abort == 0 {
		d.metrics.Aborts.WithLabelValues(trigger, "skipped_disabled").Inc()
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
			req, _ := http.NewRequestWithContext(ctx, http.MethodPost, engineURL(d.engineURL, rq.decoderPort, "/abort_request", nil), bytes.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			result := "ok"
			resp, err := d.client.Do(req)
			if err != nil {
				result = "error"
			} else {
				_ = resp.Body.Close()
				if resp.StatusCode/100 != 2 {
					result = "error"
				}
			}
			cancel()
			d.metrics.Aborts.WithLabelValues(trigger, result).Inc()
			rq.log.V(1).Info("abort_request sent", "rid", rid, "trigger", trigger, "attempt", attempt+1, "result", result)
		}
	}()
}
