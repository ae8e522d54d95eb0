package batching

import (
	"errors"
	"fmt"
	"time"

	"sync"

	"github.com/pdgate/pdgate/cmd/sim/costmodel"
)

// KVFullPolicy says what happens when a request's KV does not fit.
type KVFullPolicy string

const (
	// PolicyQueue reserves prompt+output KV at admission and queues requests that do not fit.
	PolicyQueue KVFullPolicy = "queue"
	// PolicyPreempt reserves KV as it grows and, when full, preempts the newest running
	// request (its KV is dropped and recomputed when it is readmitted, as vLLM does).
	PolicyPreempt KVFullPolicy = "preempt"
	// PolicyReject refuses a request at submission when its prompt+output KV does not fit now.
	PolicyReject KVFullPolicy = "reject"
)

// ParsePolicy validates a policy name.
func ParsePolicy(s string) (KVFullPolicy, error) {
	switch p := KVFullPolicy(s); p {
	case PolicyQueue, PolicyPreempt, PolicyReject:
		return p, nil
	case "":
		return PolicyQueue, nil
	}
	return "", fmt.Errorf("kv full policy must be one of queue, preempt, reject; got %q", s)
}

var (
	// ErrKVFull is returned by Submit under PolicyReject when the KV is full.
	ErrKVFull = errors.New("KV cache full")
	// ErrTooLarge is returned when prompt+output can never fit in the KV capacity.
	ErrTooLarge = errors.New("request needs more KV than the server has")
	// ErrCancelled ends a request cancelled by its caller (client gone, abort).
	ErrCancelled = errors.New("request cancelled")
	// ErrClosed ends requests still in flight when the scheduler closes.
	ErrClosed = errors.New("scheduler closed")
)

// Config configures a Scheduler.
type Config struct {
	Profile              *costmodel.Profile
	Clock                Clock
	MaxBatch             int
	KVCapacityTokens     int
	ChunkedPrefillTokens int // 0: a prompt prefills in one step
	Policy               KVFullPolicy
	// StepExtra is added to every step: the lateness of a step that ends on a wall-clock
	// timer, for simulations that model a real-process simulator (0 for the engine itself).
	StepExtra time.Duration
	// Observer is called with the scheduler's lock held: it must not block or call back.
	Observer Observer
}

// Observer receives request events (for metrics).
type Observer interface {
	PrefillDone(r *Request, computedTokens int, d time.Duration)
	Finished(r *Request)
	Preempted(r *Request)
}

// FirstTokenObserver is an optional Observer extension told when a request emits its first
// token (with the scheduler's lock held, like Observer). Virtual-time cluster simulations use
// it: a request whose KV was transferred has no prefill step, so PrefillDone never fires.
type FirstTokenObserver interface {
	FirstToken(r *Request)
}

// Request is one sequence in the scheduler. Set the exported fields before Submit.
type Request struct {
	ID           string
	PromptTokens int
	// CachedTokens are already in KV when the request is admitted (prefix-cache hits or a
	// KV transferred from a prefill server); they cost no prefill compute.
	CachedTokens int
	OutputTokens int
	// ExtraPrefill is added to the step that runs the request's first prefill chunk
	// (local multimodal encode on the same GPU).
	ExtraPrefill time.Duration

	s           *Scheduler
	notify      chan struct{}
	target      int // tokens whose KV must be present before decoding
	prefilled   int
	generated   int
	reserved    int
	recomputing bool
	started     bool
	running     bool
	done        bool
	cancelled   bool
	err         error
	preemptions int
	submittedAt time.Time
	scheduledAt time.Time
	prefillAt   time.Time
	firstAt     time.Time
	lastAt      time.Time
	doneAt      time.Time
}

// Progress is a consistent snapshot of a request.
type Progress struct {
	Generated   int
	Done        bool
	Err         error
	Preemptions int
	SubmittedAt time.Time
	// ScheduledAt is the first admission into the running batch; a preempted request keeps
	// it, as vLLM's first SCHEDULED event does (engine request metrics count from it).
	ScheduledAt    time.Time
	PrefillStartAt time.Time
	FirstTokenAt   time.Time
	// LastTokenAt can precede DoneAt on a clock that moves while the step completes.
	LastTokenAt time.Time
	DoneAt      time.Time
}

// Notify is signalled (coalesced) whenever the request makes progress.
func (r *Request) Notify() <-chan struct{} { return r.notify }

// Progress returns the request's state.
func (r *Request) Progress() Progress {
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return Progress{Generated: r.generated, Done: r.done, Err: r.err, Preemptions: r.preemptions,
		SubmittedAt: r.submittedAt, ScheduledAt: r.scheduledAt, PrefillStartAt: r.prefillAt, FirstTokenAt: r.firstAt,
		LastTokenAt: r.lastAt, DoneAt: r.doneAt}
}

// Cancel ends the request; its KV is released at once (waiting) or at the end of the
// current step (running).
func (r *Request) Cancel() {
	s := r.s
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.done || r.cancelled {
		return
	}
	r.cancelled = true
	if !r.running {
		s.removeWaiting(r)
		s.finish(r, ErrCancelled)
	}
}

// Stats is the scheduler's load.
type Stats struct {
	Running, Waiting int
	KVUsedTokens     int
	KVCapacityTokens int
	Preemptions      int
	Finished         int
	PromptTokens     int // prompt tokens computed (not cached)
	GeneratedTokens  int
}

// Scheduler is one server's continuous-batching engine.
type Scheduler struct {
	cfg      Config
	mu       sync.Mutex
	waiting  []*Request
	running  []*Request
	reserved int
	stepping bool
	closed   bool
	stats    Stats
}

// New validates cfg and returns an idle scheduler.
func New(cfg Config) (*Scheduler, error) {
	switch {
	case cfg.Profile == nil:
		return nil, errors.New("batching: Profile is required")
	case cfg.Clock == nil:
		return nil, errors.New("batching: Clock is required")
	case cfg.MaxBatch <= 0:
		return nil, fmt.Errorf("batching: MaxBatch must be > 0, got %d", cfg.MaxBatch)
	case cfg.KVCapacityTokens <= 0:
		return nil, fmt.Errorf("batching: KVCapacityTokens must be > 0, got %d", cfg.KVCapacityTokens)
	case cfg.ChunkedPrefillTokens < 0:
		return nil, fmt.Errorf("batching: ChunkedPrefillTokens must be >= 0, got %d", cfg.ChunkedPrefillTokens)
	case cfg.StepExtra < 0:
		return nil, fmt.Errorf("batching: StepExtra must be >= 0, got %v", cfg.StepExtra)
	}
	p, err := ParsePolicy(string(cfg.Policy))
	if err != nil {
		return nil, fmt.Errorf("batching: %w", err)
	}
	cfg.Policy = p
	return &Scheduler{cfg: cfg}, nil
}

// Submit queues r. It fails with ErrTooLarge, ErrKVFull (PolicyReject) or ErrClosed.
func (s *Scheduler) Submit(r *Request) error {
	if r.PromptTokens <= 0 {
		return errors.New("batching: request needs at least one prompt token")
	}
	if r.OutputTokens < 0 {
		return errors.New("batching: negative output tokens")
	}
	if r.CachedTokens > r.PromptTokens {
		r.CachedTokens = r.PromptTokens
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if r.PromptTokens+r.OutputTokens > s.cfg.KVCapacityTokens {
		return ErrTooLarge
	}
	r.s = s
	r.notify = make(chan struct{}, 1)
	r.target = r.PromptTokens
	r.submittedAt = s.cfg.Clock.Now()
	if s.cfg.Policy == PolicyReject && s.reserved+s.need(r) > s.cfg.KVCapacityTokens {
		return ErrKVFull
	}
	s.waiting = append(s.waiting, r)
	s.kick()
	return nil
}

// Stats returns the current load.
func (s *Scheduler) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.Running, st.Waiting = len(s.running), len(s.waiting)
	st.KVCapacityTokens = s.cfg.KVCapacityTokens
	for _, r := range s.running {
		st.KVUsedTokens += r.prefilled + r.generated
		if r.recomputing {
			st.KVUsedTokens -= r.generated
		}
	}
	return st
}

// Close fails every request in flight; later Submits fail with ErrClosed.
func (s *Scheduler) Close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for _, r := range append(append([]*Request{}, s.waiting...), s.running...) {
		s.finish(r, ErrClosed)
	}
	s.waiting, s.running = nil, nil
}

func (s *Scheduler) need(r *Request) int {
	if s.cfg.Policy == PolicyPreempt {
		return r.target + r.generated - boolInt(r.recomputing)*r.generated
	}
	return r.PromptTokens + r.OutputTokens
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

func (s *Scheduler) removeWaiting(r *Request) {
	for i, w := range s.waiting {
		if w == r {
			s.waiting = append(s.waiting[:i], s.waiting[i+1:]...)
			return
		}
	}
}

func (s *Scheduler) removeRunning(r *Request) {
	for i, w := range s.running {
		if w == r {
			s.running = append(s.running[:i], s.running[i+1:]...)
			return
		}
	}
}

func (s *Scheduler) finish(r *Request, err error) {
	if r.done {
		return
	}
	if r.running {
		s.reserved -= r.reserved
		r.reserved = 0
		r.running = false
	}
	r.done, r.err, r.doneAt = true, err, s.cfg.Clock.Now()
	if err == nil {
		s.stats.Finished++
	}
	if s.cfg.Observer != nil {
		s.cfg.Observer.Finished(r)
	}
	signal(r)
}

func signal(r *Request) {
	select {
	case r.notify <- struct{}{}:
	default:
	}
}
