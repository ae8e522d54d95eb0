package epp

import (
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate/bench/report"
	"github.com/pdgate/pdgate/plugins/framework/plugintest"
)

func TestLookupConfig(t *testing.T) {
	for _, tc := range []struct {
		name, err string
		traced    bool
	}{
		{name: "recommended"},
		{name: "recommended" + TracedSuffix, traced: true},
		{name: "llmd-pd" + TracedSuffix, traced: true},
		{name: "gie-default" + TracedSuffix, err: "only pdgate's configs trace"},
		{name: FloorConfig + TracedSuffix, err: "only pdgate's configs trace"},
		{name: "nope" + TracedSuffix, err: `unknown config "nope+tracing"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := lookupConfig(tc.name)
			if plugintest.WantErr(t, err, tc.err) {
				return
			}
			if c.Name != tc.name || c.Traced != tc.traced || (tc.traced && c.Recommended) {
				t.Fatalf("got %+v", c)
			}
		})
	}
}

// A traced config is judged against its untraced self at each size, and only while spans
// reached the receiver; it has no goals against stock GIE of its own.
func TestTracingGoals(t *testing.T) {
	traced, _ := lookupConfig("recommended" + TracedSuffix)
	for _, tc := range []struct {
		name  string
		on    time.Duration
		spans float64
		met   bool
	}{
		{name: "within 3 %", on: 102 * time.Millisecond, spans: 3, met: true},
		{name: "over 3 %", on: 104 * time.Millisecond, spans: 3},
		{name: "no spans arrived", on: 100 * time.Millisecond, spans: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := &Results{Sizes: []int{1 << 10}, Configs: []ConfigResult{
				{Config: DefaultConfigs[0], Sizes: []SizeResult{sized(1<<10, 100, 50*time.Millisecond, time.Second)}},
				{Config: configByName(t, "recommended"), Sizes: []SizeResult{sized(1<<10, 100, 100*time.Millisecond, time.Second)}},
				{Config: traced, SpansPerRequest: tc.spans, Sizes: []SizeResult{sized(1<<10, 100, tc.on, time.Second)}},
			}}
			var got []Goal
			for _, g := range Goals(res) {
				if g.Config == traced.Name {
					got = append(got, g)
				}
			}
			if len(got) != 1 || math.Abs(got[0].Measured-float64(tc.on)/float64(100*time.Millisecond)) > 1e-9 || got[0].Met != tc.met {
				t.Fatalf("goals of %s: %+v", traced.Name, got)
			}
			r := report.New("epp", "tracing")
			build(r, DefaultOptions(true), res)
			md, err := r.Write(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			text, _ := os.ReadFile(md)
			if !strings.Contains(string(text), "Tracing on against off") {
				t.Fatalf("report lacks the tracing table:\n%s", text)
			}
		})
	}
}
