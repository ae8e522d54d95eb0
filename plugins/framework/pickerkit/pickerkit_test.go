package pickerkit

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"
	k8stypes "k8s.io/apimachinery/pkg/types"
	logutil "sigs.k8s.io/gateway-api-inference-extension/pkg/common/observability/logging"
	fwkdl "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/datalayer"
	fwkplugin "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/plugin"
	fwksched "sigs.k8s.io/gateway-api-inference-extension/pkg/epp/framework/interface/scheduling"

	"github.com/pdgate/pdgate/plugins/framework/pluginkit"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func ep(ns, name string) *fwksched.ScoredEndpoint {
	md := &fwkdl.EndpointMetadata{NamespacedName: k8stypes.NamespacedName{Namespace: ns, Name: name}}
	return &fwksched.ScoredEndpoint{Endpoint: fwksched.NewEndpoint(md, nil, nil)}
}

func keys(eps []*fwksched.ScoredEndpoint) []string {
	out := make([]string, len(eps))
	for i, e := range eps {
		out[i] = e.GetMetadata().NamespacedName.String()
	}
	return out
}

func TestParseParameters(t *testing.T) {
	tests := []struct {
		raw, wantErr string
		want         int
	}{
		{raw: "", want: 1},
		{raw: "{}", want: 1},
		{raw: `{"maxNumOfEndpoints": 4}`, want: 4},
		{raw: `{"maxNumOfEndpoints": 0}`, want: 1},
		{raw: `{"maxNumOfEndpoints": "x"}`, wantErr: `t "n": invalid parameters`},
		{raw: `{"other": 1}`, wantErr: "other"},
	}
	for _, tt := range tests {
		t.Run(tt.raw, func(t *testing.T) {
			p, err := ParseParameters("t", "n", json.RawMessage(tt.raw))
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			if p.MaxNumOfEndpoints != tt.want {
				t.Fatalf("%+v, %v; want %d", p, err, tt.want)
			}
		})
	}
}

func TestShuffle(t *testing.T) {
	in := func() []*fwksched.ScoredEndpoint {
		return []*fwksched.ScoredEndpoint{ep("b", "x"), ep("a", "y"), ep("a", "x"), ep("c", "a")}
	}
	c := in()
	Canonical(c)
	if got, want := keys(c), []string{"a/x", "a/y", "b/x", "c/a"}; !slices.Equal(got, want) {
		t.Fatalf("Canonical: %v, want %v", got, want)
	}
	// seeded: the result depends on the seed only, not on the input order
	a, b := in(), in()
	slices.Reverse(b)
	NewRand(1, true).Shuffle(a)
	NewRand(1, true).Shuffle(b)
	if !slices.Equal(keys(a), keys(b)) {
		t.Fatalf("seeded shuffles of two orders differ: %v %v", keys(a), keys(b))
	}
	// unseeded: still a permutation
	u := in()
	NewRand(0, false).Shuffle(u)
	got := keys(u)
	slices.Sort(got)
	if !slices.Equal(got, []string{"a/x", "a/y", "b/x", "c/a"}) {
		t.Fatalf("unseeded shuffle lost endpoints: %v", got)
	}
	if r := Targets(a, 2); len(r.TargetEndpoints) != 2 {
		t.Fatalf("Targets kept %d", len(r.TargetEndpoints))
	}
	if r := Targets(a, 9); len(r.TargetEndpoints) != 4 {
		t.Fatalf("Targets kept %d", len(r.TargetEndpoints))
	}
}

func TestNewBase(t *testing.T) {
	tests := []struct {
		name    string
		max     int
		rnd     *Rand
		wantMax int
		seeded  bool
	}{
		{"defaults", 0, nil, DefaultMaxNumOfEndpoints, false},
		{"negative max falls back", -3, nil, DefaultMaxNumOfEndpoints, false},
		{"seeded source kept", 4, NewRand(7, true), 4, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := NewBase("max-score-picker", "p", tc.max, tc.rnd)
			if b.Max != tc.wantMax || b.Rand == nil || b.Rand.Seeded() != tc.seeded {
				t.Fatalf("Base = max %d, rand %v; want max %d, seeded %v", b.Max, b.Rand, tc.wantMax, tc.seeded)
			}
			if tn := b.TypedName(); tn.Type != "max-score-picker" || tn.Name != "p" {
				t.Fatalf("TypedName = %v", tn)
			}
		})
	}
}

// testKind picks the first Max candidates as they come.
var testKind = Kind{Type: "test-picker", Pick: func(_ context.Context, p *Picker, eps []*fwksched.ScoredEndpoint) *fwksched.ProfileRunResult {
	return Targets(eps, p.Max)
}}

func TestBuild(t *testing.T) {
	names := func() []k8stypes.NamespacedName { return nil }
	seeded := fwkplugin.NewEppHandle(pluginkit.WithSeed(context.Background(), 9), names)
	tests := []struct {
		name    string
		raw     string
		handle  fwkplugin.Handle
		wantMax int
		seeded  bool
		wantErr string
	}{
		{name: "defaults", wantMax: 1},
		{name: "max", raw: `{"maxNumOfEndpoints": 3}`, wantMax: 3},
		{name: "invalid max falls back", raw: `{"maxNumOfEndpoints": -2}`, wantMax: 1},
		{name: "seeded handle", handle: seeded, wantMax: 1, seeded: true},
		{name: "unknown field", raw: `{"max": 3}`, wantErr: `test-picker "x": invalid parameters`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pl, err := testKind.Factory("x", json.RawMessage(tt.raw), tt.handle)
			if plugintest.WantErr(t, err, tt.wantErr) {
				return
			}
			p := pl.(*Picker)
			if p.Max != tt.wantMax || p.Rand.Seeded() != tt.seeded || p.TypedName() != (fwkplugin.TypedName{Type: "test-picker", Name: "x"}) {
				t.Fatalf("max %d seeded %v name %v; want %d %v", p.Max, p.Rand.Seeded(), p.TypedName(), tt.wantMax, tt.seeded)
			}
			eps := []*fwksched.ScoredEndpoint{ep("a", "x"), ep("a", "y")}
			first := eps[0]
			if r := p.Pick(context.Background(), nil, eps); len(r.TargetEndpoints) != min(tt.wantMax, 2) || r.TargetEndpoints[0] != first {
				t.Fatalf("Pick = %v, want the kind's pick: the first %d", r.TargetEndpoints, tt.wantMax)
			}
		})
	}
}

// LogCandidates logs at GIE's debug verbosity only, and below it builds nothing: a picker
// runs it on every profile of every request.
func TestLogCandidates(t *testing.T) {
	p := &Picker{Base: Base{Max: 1}}
	eps := []*fwksched.ScoredEndpoint{ep("ns", "a"), ep("ns", "b")}
	for _, tc := range []struct {
		name      string
		verbosity int
		want      []string
	}{
		{name: "info", verbosity: 0},
		{name: "debug", verbosity: logutil.DEBUG, want: []string{`"level"=4 "msg"="picking" "max-num-of-endpoints"=1 "num-of-candidates"=2`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			logger := funcr.New(func(_, args string) { got = append(got, args) }, funcr.Options{Verbosity: tc.verbosity})
			ctx := logr.NewContext(context.Background(), logger)
			p.LogCandidates(ctx, "picking", eps)
			if len(got) != len(tc.want) {
				t.Fatalf("logged %q, want %q", got, tc.want)
			}
			for i := range got {
				if !strings.HasPrefix(got[i], tc.want[i]) {
					t.Fatalf("logged %q, want it to start with %q", got[i], tc.want[i])
				}
			}
			if tc.verbosity < logutil.DEBUG {
				if n := testing.AllocsPerRun(100, func() { p.LogCandidates(ctx, "picking", eps) }); n != 0 {
					t.Fatalf("LogCandidates below debug allocated %v times", n)
				}
			}
		})
	}
}

// Targets returns the first n candidates in order; the usual single pick costs one
// allocation, the result and its slice together.
func TestTargets(t *testing.T) {
	eps := []*fwksched.ScoredEndpoint{ep("ns", "a"), ep("ns", "b"), ep("ns", "c")}
	for _, n := range []int{0, 1, 2, 3, 9} {
		r := Targets(eps, n)
		want := eps[:min(n, len(eps))]
		if len(r.TargetEndpoints) != len(want) {
			t.Fatalf("n=%d: %d targets, want %d", n, len(r.TargetEndpoints), len(want))
		}
		for i := range want {
			if r.TargetEndpoints[i] != fwksched.Endpoint(want[i]) {
				t.Fatalf("n=%d: target %d is %v, want %v", n, i, r.TargetEndpoints[i], want[i])
			}
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = Targets(eps, 1) }); n != 1 {
		t.Fatalf("a single pick allocated %v times, want 1", n)
	}
}
