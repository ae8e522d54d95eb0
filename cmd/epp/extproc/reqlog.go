package extproc

import (
	"slices"

	"github.com/go-logr/logr"
)

// withRequestValues is l with kv added to every line it writes, for a request's logger. The
// usual l.WithValues makes the backend (zap) encode kv at once: about 45 allocations for the
// request id on every request, although at the default verbosity the request path writes no
// line at all. Here kv waits until a line is written.
func withRequestValues(l logr.Logger, kv ...any) logr.Logger {
	if l.GetSink() == nil {
		return l
	}
	return l.WithSink(&requestSink{base: l.GetSink(), kv: kv})
}

// requestSink hands its key/values to the base sink with each line.
type requestSink struct {
	base logr.LogSink
	kv   []any
}

func (s *requestSink) Init(info logr.RuntimeInfo) { s.base.Init(info) }

func (s *requestSink) Enabled(level int) bool { return s.base.Enabled(level) }

func (s *requestSink) Info(level int, msg string, kv ...any) {
	s.writer().Info(level, msg, s.with(kv)...)
}

func (s *requestSink) Error(err error, msg string, kv ...any) {
	s.writer().Error(err, msg, s.with(kv)...)
}

// writer is the base sink told about requestSink's own frame, so that a line names its
// caller. It is made per line written (zapr clones its logger for it), not per request.
func (s *requestSink) writer() logr.LogSink {
	if cd, ok := s.base.(logr.CallDepthLogSink); ok {
		return cd.WithCallDepth(1)
	}
	return s.base
}

// with is the sink's key/values followed by a line's.
func (s *requestSink) with(kv []any) []any {
	return append(slices.Clip(s.kv), kv...)
}

// WithValues with nothing to add returns the sink itself: controller-runtime's
// log.FromContext calls it on every call, with no values from most callers, and a plugin that
// fetches its logger per request would otherwise allocate a sink each time.
func (s *requestSink) WithValues(kv ...any) logr.LogSink {
	if len(kv) == 0 {
		return s
	}
	return &requestSink{base: s.base, kv: s.with(kv)}
}

func (s *requestSink) WithName(name string) logr.LogSink {
	return &requestSink{base: s.base.WithName(name), kv: s.kv}
}

// WithCallDepth passes a caller's extra frames on to the base sink.
func (s *requestSink) WithCallDepth(depth int) logr.LogSink {
	cd, ok := s.base.(logr.CallDepthLogSink)
	if !ok {
		return s
	}
	return &requestSink{base: cd.WithCallDepth(depth), kv: s.kv}
}
