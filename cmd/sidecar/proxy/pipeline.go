package proxy

import (
	"net/http"
	"sync/atomic"
)

// The request walk. ServeHTTP (proxy.go) reads the routing headers and the body into a
// request and hands it to a pipeline, whose run calls the stages in order, each in its own
// file:
//
//	encode  (epd.go)     the encoder fan-out of E/P/D requests
//	prefill (prefill.go) the dialect's plan, then the prefill leg: sequential (vLLM, TRT-LLM
//	                     context_first) or concurrent with the decode (SGLang, TRT-LLM
//	                     generation_first), the retry and the failure policy
//	decode  (decode.go)  the decode leg to the local engine, streamed under the watchdog
//
// A stage hands the next one what it needs (prefill returns the decode leg to send) and never
// calls back into an earlier one. The engine's wire dialect (dialect.go; vllm.go, sglang.go,
// trtllm.go) is a strategy the prefill stage asks for the legs' bodies: it sends no leg and
// answers no client. Helpers every stage shares are leaves: legs.go (leg plumbing, body
// edits), answer.go (failure answers and the diverted-prefill count), gate.go, watchdog.go,
// release.go, dataparallel.go.

// stageEnv is what the stages of every request share: the configuration, the dialect and the
// helpers built from them.
type stageEnv struct {
	cfg       Config
	dialect   dialect
	ranks     ranks
	release   releaser
	report    reporter
	encoderRR atomic.Uint64
}

func newStageEnv(cfg Config) *stageEnv {
	r := ranks{dp: cfg.DataParallel, engineURL: cfg.EngineURL}
	return &stageEnv{
		cfg:     cfg,
		dialect: newDialect(cfg, r),
		ranks:   r,
		release: releaser{timeout: cfg.PrefillReleaseTimeout, client: cfg.PrefillReleaseClient, metrics: cfg.Metrics},
		report:  reporter{m: cfg.Metrics, engine: string(cfg.Engine)},
	}
}

// pipeline is one request's walk through the stages.
type pipeline struct {
	*stageEnv
	w  http.ResponseWriter
	r  *http.Request
	rq *request
}

// run calls the stages in order and returns the request's mode (decode-only, pd, epd,
// prefill-leg).
func (pl *pipeline) run() (mode string) {
	mode = "decode-only"
	if len(pl.rq.encoders) > 0 {
		handled, ok := pl.encode()
		if !ok {
			return "epd"
		}
		if handled {
			mode = "epd"
		}
	}
	if pl.rq.prefill == nil {
		if body := peerPrefillBody(pl.dialect, pl.rq); body != nil && mode == "decode-only" {
			pl.rq.log.V(1).Info("prefill leg from a peer sidecar served by the local engine")
			pl.decode(decodeLeg{body: body, outcome: outcomeSkipped})
			return "prefill-leg"
		}
		pl.decode(decodeLeg{body: localBody(pl.rq), outcome: outcomeSkipped})
		return mode
	}
	if mode == "decode-only" {
		mode = "pd"
	}
	next, done := pl.prefill()
	defer done()
	if next != nil {
		pl.decode(*next)
	}
	return mode
}
