package extproc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/zapr"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
)

// jsonLogger is the EPP's logger shape (zap's JSON encoder behind zapr) writing into buf.
func jsonLogger(buf *bytes.Buffer, level int) logr.Logger {
	enc := zapcore.NewJSONEncoder(zapcore.EncoderConfig{MessageKey: "msg", NameKey: "logger", CallerKey: "caller", LevelKey: "level",
		EncodeLevel: zapcore.LowercaseLevelEncoder, EncodeCaller: zapcore.ShortCallerEncoder})
	core := zapcore.NewCore(enc, zapcore.AddSync(buf), zapcore.Level(-level))
	return zapr.NewLogger(zap.New(core, zap.AddCaller()))
}

// A request logger writes the request's values on every line, with the line's own, the
// names and values added later, and the caller of the line (not reqlog.go); lines above the
// verbosity are not written.
func TestRequestValues(t *testing.T) {
	for _, tc := range []struct {
		name  string
		write func(l logr.Logger)
		want  map[string]any // "" = no line
	}{
		{name: "info", write: func(l logr.Logger) { l.Info("hello", "k", "v") },
			want: map[string]any{"msg": "hello", "x-request-id": "req-1", "k": "v"}},
		{name: "error", write: func(l logr.Logger) { l.Error(errors.New("boom"), "failed") },
			want: map[string]any{"msg": "failed", "x-request-id": "req-1", "error": "boom"}},
		{name: "with values and name", write: func(l logr.Logger) { l.WithName("sub").WithValues("plugin", "p").V(1).Info("x") },
			want: map[string]any{"msg": "x", "x-request-id": "req-1", "plugin": "p", "logger": "sub"}},
		{name: "above verbosity", write: func(l logr.Logger) { l.V(3).Info("quiet") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := withRequestValues(jsonLogger(&buf, 1), "x-request-id", "req-1")
			tc.write(l)
			if tc.want == nil {
				if buf.Len() != 0 {
					t.Fatalf("wrote %s", buf.String())
				}
				return
			}
			var got map[string]any
			if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
				t.Fatalf("%v: %s", err, buf.String())
			}
			for k, v := range tc.want {
				if got[k] != v {
					t.Errorf("%s = %v, want %v (line %s)", k, got[k], v, buf.String())
				}
			}
			if c, _ := got["caller"].(string); !strings.HasPrefix(c, "extproc/reqlog_test.go:") {
				t.Errorf("caller %q, want the test's line", c)
			}
		})
	}
}

// Making a request's logger costs one allocation where zap's WithValues costs dozens.
func TestRequestValuesAllocations(t *testing.T) {
	var buf bytes.Buffer
	base := jsonLogger(&buf, 0)
	lazy := testing.AllocsPerRun(100, func() { _ = withRequestValues(base, "x-request-id", "req-1") })
	eager := testing.AllocsPerRun(100, func() { _ = base.WithValues("x-request-id", "req-1") })
	if lazy > 2 || lazy >= eager {
		t.Fatalf("withRequestValues: %v allocations, WithValues %v", lazy, eager)
	}
	t.Logf("withRequestValues %v allocations, WithValues %v", lazy, eager)
}

// controller-runtime's log.FromContext calls WithValues with no values on every call; a
// plugin fetching its logger per request must not make a sink each time, and the lines must
// still carry the request's values.
func TestRequestLoggerFromContextAllocatesNothing(t *testing.T) {
	var buf bytes.Buffer
	ctx := logr.NewContext(context.Background(), withRequestValues(jsonLogger(&buf, 0), "x-request-id", "req-1"))
	if n := testing.AllocsPerRun(100, func() { _ = crlog.FromContext(ctx) }); n != 0 {
		t.Fatalf("log.FromContext: %v allocations per call", n)
	}
	crlog.FromContext(ctx).Info("line")
	if !strings.Contains(buf.String(), `"x-request-id":"req-1"`) {
		t.Fatalf("line lost the request's values: %s", buf.String())
	}
}
