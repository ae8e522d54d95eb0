package plugintest

import (
	"context"
	"errors"
	"testing"
)

// recorder is a testing.TB that records a failure instead of stopping the test.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper() {}

func (r *recorder) Fatalf(string, ...any) { r.failed = true }

func TestWantErr(t *testing.T) {
	errX := errors.New(`scorer "x": parameter size: must be > 0`)
	tests := []struct {
		name       string
		err        error
		want       string
		naming     []string
		wantFail   bool
		wantWanted bool
	}{
		{name: "no error wanted, none", want: ""},
		{name: "no error wanted, one", err: errX, wantFail: true},
		{name: "error wanted, none", want: "size", wantFail: true, wantWanted: true},
		{name: "error wanted, fits", err: errX, want: "size", wantWanted: true},
		{name: "error wanted, other text", err: errX, want: "count", wantFail: true, wantWanted: true},
		{name: "names the plugin", err: errX, want: "size", naming: []string{`"x"`, "scorer"}, wantWanted: true},
		{name: "does not name the plugin", err: errX, want: "size", naming: []string{"filter"}, wantFail: true, wantWanted: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			if wanted := WantErr(r, tt.err, tt.want, tt.naming...); wanted != tt.wantWanted || r.failed != tt.wantFail {
				t.Fatalf("wanted %v failed %v; want %v %v", wanted, r.failed, tt.wantWanted, tt.wantFail)
			}
		})
	}
}

type ctxKey struct{}

// Handle hands the factory the test's context and a pool with no pods.
func TestHandle(t *testing.T) {
	ctx := context.WithValue(context.Background(), ctxKey{}, "mine")
	h := Handle(ctx)
	if h.Context().Value(ctxKey{}) != "mine" {
		t.Fatal("the handle does not carry the test's context")
	}
	if pods := h.PodList(); len(pods) != 0 {
		t.Fatalf("pods %v, want none", pods)
	}
}
