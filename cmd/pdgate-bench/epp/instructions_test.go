package epp

import (
	"slices"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

func TestInstructionOptions(t *testing.T) {
	for _, tc := range []struct {
		name                     string
		requestsSet, maxPhaseSet bool
		wantRequests             []int
		wantPhase                time.Duration
	}{
		{name: "defaults scaled", wantRequests: []int{150, 75, 15, 10}, wantPhase: 30 * time.Minute},
		{name: "user's counts and cap kept", requestsSet: true, maxPhaseSet: true, wantRequests: []int{3000, 1500, 300, 60}, wantPhase: time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions(false)
			o.Instructions = true
			o.applyInstructionDefaults(tc.requestsSet, tc.maxPhaseSet)
			if !slices.Equal(o.Requests, tc.wantRequests) || o.MaxPhase != tc.wantPhase {
				t.Fatalf("requests %v phase %s, want %v %s", o.Requests, o.MaxPhase, tc.wantRequests, tc.wantPhase)
			}
		})
	}
	o := DefaultOptions(false)
	if h := o.harnessOptions(eppharness.Options{Kind: eppharness.KindPdgate}); h.Callgrind || len(h.ExtraArgs) != 0 || o.MeterName() != "cpu" {
		t.Fatalf("timed run changed the harness options: %+v", h)
	}
	o.Instructions = true
	for kind, wantArgs := range map[eppharness.Kind]int{eppharness.KindPdgate: 1, eppharness.KindStockGIE: 1, eppharness.KindFloor: 0} {
		h := o.harnessOptions(eppharness.Options{Kind: kind})
		if !h.Callgrind || len(h.ExtraArgs) != wantArgs || h.ReadyTimeout != instructionReady || o.MeterName() != "instructions" {
			t.Fatalf("%s: %+v", kind, h)
		}
	}
}
