package simbench

import "github.com/pdgate/pdgate/cmd/sim/batching"

// prefillDeadline is the sidecar's prefill deadline (Config.PrefillTimeout) for leg l: a leg
// still out is cancelled on its engine, a waiting one leaving the queue at once and a running
// one at the end of its step, and the request falls back to a local prefill (legDone, or
// submit when the leg has not reached the engine yet). Without it a request queued behind a
// prefill backlog stays there after new prefill pods come up, since an engine never hands its
// queue on, and its decode pod holds its GPU for it meanwhile.
func (s *Sim) prefillDeadline(l *leg) {
	r := l.req
	if r.finished || !r.prefillHeld {
		return // the leg returned in time
	}
	_, onEngine := r.prefill.legs[&l.br]
	if !onEngine && !r.legSubmit.IsZero() {
		return // it finished at this instant; legDone hands it on
	}
	r.fellBack = true
	if onEngine {
		l.br.Cancel()
	}
}

// fallbackLocal is the sidecar's fallback-local once the prefill deadline passed: the prefill
// pod's share ends (the sidecar's prefill-release callback fires on every way out of the leg)
// and the decode engine gets the whole prompt, reusing what its own prefix cache holds. Its
// prefill counts in the run's prefill work like any other attempt.
func (s *Sim) fallbackLocal(r *request) {
	s.res.prefillFallbacks++
	r.releasePrefill()
	if s.cfg.PrefillRelease {
		r.epp.core.PrefillReturned(r.llm.RequestId)
	}
	s.prefillOn(r.decode, &leg{kind: legLocal, req: r,
		br: batching.Request{ID: r.llm.RequestId, PromptTokens: len(r.a.Tokens), OutputTokens: r.a.Output}})
}
