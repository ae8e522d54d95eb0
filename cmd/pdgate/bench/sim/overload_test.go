package simbench

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestOverloadOptions(t *testing.T) {
	tests := []struct {
		name string
		edit func(*OverloadOptions)
		want string
	}{
		{name: "no seeds", edit: func(o *OverloadOptions) { o.Seeds = nil }, want: "--seeds"},
		{name: "no load", edit: func(o *OverloadOptions) { o.Load = 0 }, want: "--load"},
		{name: "headroom above 1", edit: func(o *OverloadOptions) { o.Headroom = 1.5 }, want: "--headroom"},
		{name: "combined shape", edit: func(o *OverloadOptions) { o.Shape = "combined" }, want: "--shape"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			o := OverloadDefaults()
			o.Root, o.Out, o.Stdout = "../../../..", t.TempDir(), io.Discard
			tc.edit(&o)
			if err := RunOverload(context.Background(), o); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one naming %s", err, tc.want)
			}
		})
	}
}

// TestOverloadComparesGateAndForecast runs a small burst: the gate (on the virtual clock, so it
// admits while the pool has room) admits requests that then miss the SLO; the forecast refuses
// more and its admitted requests miss less, on the same arrivals.
func TestOverloadComparesGateAndForecast(t *testing.T) {
	if testing.Short() {
		t.Skip("simulation")
	}
	o := OverloadDefaults()
	o.Root, o.Out, o.Stdout = "../../../..", t.TempDir(), io.Discard
	o.Pods, o.Burst, o.Seeds, o.Parallel = 4, 4*time.Second, []int64{1}, 1
	if err := RunOverload(context.Background(), o); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(o.Out, "overload.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Data OverloadData `json:"data"`
	}
	if err := json.Unmarshal(raw, &rep); err != nil {
		t.Fatal(err)
	}
	runs := map[string]OverloadCell{}
	for _, r := range rep.Data.Runs {
		runs[r.Admission] = r.Phases[len(r.Phases)-1]
	}
	g, f := runs[AdmissionGate], runs[AdmissionForecast]
	if g.Sent == 0 || g.Sent != f.Sent {
		t.Fatalf("sent gate %d, forecast %d: want the same arrivals", g.Sent, f.Sent)
	}
	if g.Admitted == 0 {
		t.Fatal("the gate admitted nothing: its detector reads metrics' age on the wall clock")
	}
	if f.Admitted >= g.Admitted || f.MissPct >= g.MissPct {
		t.Fatalf("forecast admitted %d (missed %.1f %%), gate %d (%.1f %%): want fewer admitted, fewer missing; %+v", f.Admitted, f.MissPct, g.Admitted, g.MissPct, rep.Data.Runs)
	}
	for file, want := range map[string]bool{"gate-epp.yaml": false, "forecast-epp.yaml": true} {
		cfg, err := os.ReadFile(filepath.Join(o.Out, file))
		if err != nil || strings.Contains(string(cfg), "forecast-admitter") != want {
			t.Fatalf("%s: %v, want forecast-admitter listed: %v\n%s", file, err, want, cfg)
		}
	}
}
