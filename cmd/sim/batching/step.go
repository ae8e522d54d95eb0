package batching

import "time"

type chunk struct {
	r          *Request
	start, end int
}

type plan struct {
	chunks   []chunk
	decoders []*Request
	began    time.Time
}

// kick plans and starts the next step unless one is running. Caller holds s.mu.
func (s *Scheduler) kick() {
	if s.stepping || s.closed {
		return
	}
	p := s.plan()
	if len(p.chunks) == 0 && len(p.decoders) == 0 {
		return
	}
	d := s.stepTime(p)
	s.stepping = true
	s.cfg.Clock.AfterFunc(d, func() { s.complete(p) })
}

func (s *Scheduler) admit() {
	for len(s.waiting) > 0 && len(s.running) < s.cfg.MaxBatch {
		r := s.waiting[0]
		need := s.need(r)
		// running sequences are never preempted to admit a new one (vLLM preempts only to
		// let running sequences grow)
		if s.reserved+need > s.cfg.KVCapacityTokens {
			return
		}
		s.waiting = s.waiting[1:]
		s.reserved += need
		r.reserved = need
		r.running = true
		if !r.recomputing {
			r.prefilled = r.CachedTokens
		}
		s.running = append(s.running, r)
	}
}

// preemptNewest drops the KV of the most recently admitted running request and puts it at
// the head of the queue; its prompt and generated tokens are recomputed on readmission.
func (s *Scheduler) preemptNewest() bool {
	if len(s.running) == 0 {
		return false
	}
	r := s.running[len(s.running)-1]
	s.running = s.running[:len(s.running)-1]
	s.reserved -= r.reserved
	r.reserved, r.running = 0, false
	if r.generated > 0 {
		r.recomputing = true
		r.target = r.PromptTokens + r.generated
	}
	r.prefilled = 0
	r.preemptions++
	s.stats.Preemptions++
	s.waiting = append([]*Request{r}, s.waiting...)
	if s.cfg.Observer != nil {
		s.cfg.Observer.Preempted(r)
	}
	return true
}

func (s *Scheduler) plan() plan {
	s.admit()
	if s.cfg.Policy == PolicyPreempt {
		// every decoding sequence grows by one token this step
		for {
			grow := 0
			for _, r := range s.running {
				if r.prefilled >= r.target && !r.cancelled {
					grow++
				}
			}
			if s.reserved+grow <= s.cfg.KVCapacityTokens || len(s.running) <= 1 || !s.preemptNewest() {
				break
			}
		}
	}
	p := plan{began: s.cfg.Clock.Now()}
	budget := s.cfg.ChunkedPrefillTokens
	for _, r := range s.running {
		if r.cancelled {
			continue
		}
		if r.prefilled < r.target {
			if s.cfg.ChunkedPrefillTokens > 0 && budget <= 0 {
				continue
			}
			n := r.target - r.prefilled
			if s.cfg.ChunkedPrefillTokens > 0 && n > budget {
				n = budget
			}
			budget -= n
			p.chunks = append(p.chunks, chunk{r: r, start: r.prefilled, end: r.prefilled + n})
			scheduled(r, p.began)
			continue
		}
		if r.generated < r.OutputTokens {
			p.decoders = append(p.decoders, r)
			scheduled(r, p.began)
		}
	}
	return p
}

// scheduled marks a request's first step: admitted but left out of a step by the chunked-prefill
// budget, it is still waiting in vLLM's sense (the engine request metrics' queue interval).
func scheduled(r *Request, at time.Time) {
	if r.scheduledAt.IsZero() {
		r.scheduledAt = at
	}
}

// stepTime: a prefill chunk and the decode step of the same iteration run back to back on
// one GPU, so every decoding sequence waits for the chunk — the interference that
// disaggregation removes.
func (s *Scheduler) stepTime(p plan) time.Duration {
	prof := s.cfg.Profile
	d := s.cfg.StepExtra
	if len(p.chunks) > 0 {
		d += prof.PrefillOverhead()
		for _, c := range p.chunks {
			d += prof.PrefillSpan(c.start, c.end)
			if !c.r.started {
				d += c.r.ExtraPrefill
			}
		}
	}
	if len(p.decoders) > 0 {
		resident := 0
		for _, r := range p.decoders {
			resident += r.target + r.generated
			if r.recomputing {
				resident -= r.generated
			}
		}
		d += prof.DecodeStep(len(p.decoders), resident)
	}
	for _, c := range p.chunks {
		if !c.r.started {
			c.r.started = true
			c.r.prefillAt = p.began
		}
	}
	return d
}

func (s *Scheduler) complete(p plan) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.stepping = false
	if s.closed {
		return
	}
	now := s.cfg.Clock.Now()
	for _, c := range p.chunks {
		r := c.r
		if !r.running || r.done {
			continue
		}
		r.prefilled = c.end
		s.stats.PromptTokens += c.end - c.start
		if r.prefilled < r.target {
			continue
		}
		if r.recomputing {
			r.recomputing = false
			continue
		}
		if s.cfg.Observer != nil {
			s.cfg.Observer.PrefillDone(r, r.PromptTokens-r.CachedTokens, now.Sub(r.prefillAt))
		}
		if r.OutputTokens > 0 {
			s.emit(r, now)
		}
		signal(r)
	}
	for _, r := range p.decoders {
		if r.running && !r.done && !r.cancelled {
			s.emit(r, now)
		}
	}
	for _, r := range append([]*Request{}, s.running...) {
		switch {
		case r.cancelled:
			s.removeRunning(r)
			s.finish(r, ErrCancelled)
		case r.prefilled >= r.target && !r.recomputing && r.generated >= r.OutputTokens:
			s.removeRunning(r)
			s.finish(r, nil)
		}
	}
	s.kick()
}

func (s *Scheduler) emit(r *Request, now time.Time) {
	r.generated++
	r.lastAt = now
	s.stats.GeneratedTokens++
	if r.generated == 1 {
		r.firstAt = now
		if o, ok := s.cfg.Observer.(FirstTokenObserver); ok {
			o.FirstToken(r)
		}
	}
	if s.cfg.Policy == PolicyPreempt {
		r.reserved++
		s.reserved++
	}
	signal(r)
}
