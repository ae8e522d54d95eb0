package plugintest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"

	"github.com/pdgate/pdgate/plugins/framework/contract"
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

// namedPlugin is a plugin of its own type for TestBuild.
type namedPlugin struct{ name string }

func (p *namedPlugin) TypedName() fwkplugin.TypedName {
	return fwkplugin.TypedName{Type: "t", Name: p.name}
}

func TestBuild(t *testing.T) {
	build := func(name string, raw json.RawMessage, _ fwkplugin.Handle) (fwkplugin.Plugin, error) {
		switch string(raw) {
		case "bad":
			return nil, errors.New("bad parameters")
		case "other":
			return notNamed{}, nil
		}
		return &namedPlugin{name: name}, nil
	}
	tests := []struct {
		name, raw string
		wantFail  bool
	}{
		{name: "built", raw: ""},
		{name: "factory fails", raw: "bad", wantFail: true},
		{name: "another type", raw: "other", wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			p := Build[*namedPlugin](r, build, "x", tt.raw, nil)
			if r.failed != tt.wantFail || (p != nil && p.name != "x") || (p == nil) != tt.wantFail {
				t.Fatalf("failed %v plugin %+v; want failed %v", r.failed, p, tt.wantFail)
			}
		})
	}
}

// notNamed is a plugin of another type.
type notNamed struct{}

func (notNamed) TypedName() fwkplugin.TypedName { return fwkplugin.TypedName{Type: "other"} }

func TestWantAnswer(t *testing.T) {
	shed := &contract.Answer{Status: 429, Headers: []contract.Header{{Name: "x-reason", Value: "saturated"}}}
	tests := []struct {
		name     string
		err      error
		status   int
		headers  []contract.Header
		wantFail bool
		wantAns  bool
	}{
		{name: "admitted, wanted"},
		{name: "refused, admission wanted", err: shed, wantFail: true},
		{name: "answer wanted, none", status: 429, wantFail: true},
		{name: "answer wanted, plain error", err: errors.New("boom"), status: 429, wantFail: true},
		{name: "other status", err: shed, status: 503, wantFail: true},
		{name: "status and header", err: fmt.Errorf("wrapped: %w", shed), status: 429, headers: []contract.Header{{Name: "x-reason", Value: "saturated"}}, wantAns: true},
		{name: "header with another value", err: shed, status: 429, headers: []contract.Header{{Name: "x-reason", Value: "other"}}, wantFail: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := &recorder{TB: t}
			a := WantAnswer(r, tt.err, tt.status, tt.headers...)
			if r.failed != tt.wantFail || (a != nil) != tt.wantAns {
				t.Fatalf("failed %v answer %v; want %v %v", r.failed, a, tt.wantFail, tt.wantAns)
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
