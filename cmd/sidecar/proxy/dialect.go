package proxy

import (
	"context"
	"fmt"
	"time"

	"github.com/pdgate/pdgate/cmd/sidecar/jsonbody"
	"github.com/pdgate/pdgate/plugins/wire/protocol"
)

// dialect is the decode engine's wire dialect, the strategy the stages call: how the prefill
// and decode legs' bodies are built and how the prefill's answer is read into the decode leg.
// Implementations (vllmDialect, sglangDialect, trtDialect) send no leg, answer no client and
// call no stage; the prefill stage (prefill.go) sends what they build.
type dialect interface {
	// plan checks rq against the dialect (repeated keys it sets, its routing headers) and
	// builds the request's legs. A *setupError means no leg may be sent: the prefill stage
	// answers it (or falls back to local prefill, as the failure policy says).
	plan(ctx context.Context, rq *request) (*legPlan, error)
	// producerParams returns the producer-side handoff object (and its top-level key) that a
	// peer sidecar's prefill leg carries for this engine, rebuilt from the keys that name no
	// host, or nil when the body is no such leg (prefillleg.go).
	producerParams(obj *jsonbody.Object) (string, *jsonbody.Object)
}

// legPlan is one request's legs in its dialect.
type legPlan struct {
	// prefill is the prefill leg's body.
	prefill []byte
	// concurrent legs go out together (SGLang, TRT-LLM generation_first): decode is the
	// decode leg's body, built before either leg; resetAfterCommit says whether a prefill
	// failure still cuts a decode answer that started (gate); abort, when set, drops the
	// decode on the engine when the prefill fails or the watchdog fires.
	concurrent       bool
	decode           []byte
	resetAfterCommit bool
	abort            aborter
	// sequential legs (vLLM, TRT-LLM context_first): reader builds the decode leg from the
	// prefill's answer.
	reader prefillReader
	// probe: decode first with the client's body and prefill only when the engine asks for
	// it (vLLM shared-storage).
	probe bool
	// fallback is the body of a decode with local prefill after a failed prefill leg (nil:
	// the client's body less the KV fields).
	fallback []byte
	// unchecked: the decode's cached tokens say what a shared store kept, not what a handoff
	// delivered (a decode recomputes what expired), so the handoff checks do not apply.
	unchecked bool
}

// prefillReader reads a sequential prefill's answer into the decode leg.
type prefillReader interface {
	// decodeBody returns the decode leg's body, why the answer handed no usable KV over
	// ("" when it did; else the diverted reason, no_kv_params or wrong_rank, and the decode
	// prefills by itself) and, when set, the cached_tokens the decode answer reports.
	decodeBody(rq *request, resp *jsonbody.Object) (body []byte, fallback string, cached *int64)
}

// aborter drops a request on the local decode engine (SGLang's /abort_request).
type aborter interface {
	abort(rq *request, trigger string)
}

// setupError is a request a dialect cannot send legs for.
type setupError struct {
	kind setupKind
	msg  string
	// what names the refused target ("bootstrap") and target is its address (setupRefused).
	what   string
	target protocol.HostPort
}

type setupKind int

const (
	// setupFailed: the prefill leg cannot be set up (the failure policy applies).
	setupFailed setupKind = iota
	// setupBadBody: the client's body is refused (400).
	setupBadBody
	// setupRefused: a target the dialect derived is refused by the allow-list (403).
	setupRefused
)

func (e *setupError) Error() string {
	if e.kind == setupRefused {
		return e.what + " target " + e.target.String() + " not allowed"
	}
	return e.msg
}

func cannotSetUp(format string, args ...any) error {
	return &setupError{kind: setupFailed, msg: fmt.Sprintf(format, args...)}
}

// duplicateKey refuses a body that repeats a key the sidecar controls (the common prefill
// controls, the KV fields and the dialect's own keys).
func duplicateKey(rq *request, keys ...string) error {
	all := append(append([]string(nil), controlKeys...), keys...)
	all = append(all, kvKeys...)
	if k, dup := rq.obj.Duplicated(all...); dup {
		return &setupError{kind: setupBadBody, msg: fmt.Sprintf("request body repeats the top-level key %q", k)}
	}
	return nil
}

// newDialect returns the strategy of cfg.Engine.
func newDialect(cfg Config, r ranks) dialect {
	switch cfg.Engine {
	case EngineSGLang:
		return &sglangDialect{rids: newRidGen(), bootstrapPort: cfg.SGLangBootstrapPort, allow: cfg.Allow,
			client: cfg.DecodeClient, engineURL: cfg.EngineURL, metrics: cfg.Metrics}
	case EngineTRTLLM:
		return &trtDialect{schedule: cfg.TRTSchedule, snow: newSnowflake(cfg.TRTMachineID, time.Now), serverInfo: newServerInfoCache(cfg)}
	}
	return vllmDialect{connector: cfg.KVConnector, ranks: r}
}
