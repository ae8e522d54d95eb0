// Package tracing wraps a loaded scheduler configuration so that every filter, scorer, picker
// and the profile handler record into the request's decisiontrace.Trace, and hands finished
// traces to the ext_proc server by request ID.
package tracing

import (
	"sync"

	"github.com/pdgate/pdgate/plugins/decisiontrace"
)

// Registry holds traces between the scheduler (which records them) and the ext_proc stream
// (which takes them). It is bounded: when a trace is never taken (a scheduler driven without
// a stream, a stream that died first), the oldest entries are evicted.
type Registry struct {
	mu    sync.Mutex
	m     map[string]*decisiontrace.Trace
	order []string // FIFO of inserted IDs; may hold IDs already taken
	cap   int
}

// NewRegistry returns a registry holding at most capacity traces (minimum 1).
func NewRegistry(capacity int) *Registry {
	if capacity < 1 {
		capacity = 1
	}
	return &Registry{m: make(map[string]*decisiontrace.Trace), cap: capacity}
}

// Put stores the trace of a request, replacing an earlier one with the same ID.
func (r *Registry) Put(requestID string, t *decisiontrace.Trace) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, ok := r.m[requestID]; !ok {
		r.order = append(r.order, requestID)
	}
	r.m[requestID] = t
	for len(r.m) > r.cap && len(r.order) > 0 {
		delete(r.m, r.order[0])
		r.order = r.order[1:]
	}
	// Taken IDs linger in order (and a re-used ID appears twice); compact when it grows well
	// past the live set, keeping each live ID once at its latest position.
	if len(r.order) > 2*r.cap+16 {
		seen := make(map[string]bool, len(r.m))
		live := make([]string, 0, len(r.m))
		for i := len(r.order) - 1; i >= 0; i-- {
			id := r.order[i]
			if _, ok := r.m[id]; ok && !seen[id] {
				seen[id] = true
				live = append(live, id)
			}
		}
		for i, j := 0, len(live)-1; i < j; i, j = i+1, j-1 {
			live[i], live[j] = live[j], live[i]
		}
		r.order = live
	}
}

// Take returns and forgets the trace of a request; nil when there is none.
func (r *Registry) Take(requestID string) *decisiontrace.Trace {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.m[requestID]
	if ok {
		delete(r.m, requestID)
	}
	return t
}

// Len returns the number of traces held.
func (r *Registry) Len() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}
