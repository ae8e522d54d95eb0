package epp

import (
	"slices"
	"testing"
	"time"

	"github.com/pdgate/pdgate/cmd/pdgate-bench/eppharness"
)

func TestInstructionOptions(t *testing.T) {
	for _, tc := range []struct {
		name                                     string
		requestsSet, maxPhaseSet, concurrencySet bool
		wantRequests                             []int
		wantPhase                                time.Duration
		wantConcurrency                          int
	}{
		{name: "defaults scaled", wantRequests: []int{150, 75, 15, 10}, wantPhase: 30 * time.Minute, wantConcurrency: 4},
		{name: "user's counts, cap and streams kept", requestsSet: true, maxPhaseSet: true, concurrencySet: true,
			wantRequests: []int{3000, 1500, 300, 60}, wantPhase: time.Minute, wantConcurrency: 32},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := DefaultOptions(false)
			o.Instructions = true
			o.applyInstructionDefaults(tc.requestsSet, tc.maxPhaseSet, tc.concurrencySet)
			if !slices.Equal(o.Requests, tc.wantRequests) || o.MaxPhase != tc.wantPhase || o.Concurrency != tc.wantConcurrency {
				t.Fatalf("requests %v phase %s streams %d, want %v %s %d", o.Requests, o.MaxPhase, o.Concurrency, tc.wantRequests, tc.wantPhase, tc.wantConcurrency)
			}
		})
	}
	o := DefaultOptions(false)
	if w, _ := o.idleWindow(); w != 2*time.Second || o.messageTimeout() != 0 {
		t.Fatalf("timed run: idle window %s, message timeout %s", w, o.messageTimeout())
	}
	if h := o.harnessOptions(eppharness.Options{Kind: eppharness.KindPdgate}); h.Callgrind || len(h.ExtraArgs) != 0 || o.MeterName() != "cpu" {
		t.Fatalf("timed run changed the harness options: %+v", h)
	}
	o.Instructions = true
	if w, n := o.idleWindow(); w != 60*time.Second || n < 2 || o.messageTimeout() != instructionMessageTimeout {
		t.Fatalf("instruction run: idle window %s in %d slices, message timeout %s", w, n, o.messageTimeout())
	}
	for kind, wantArgs := range map[eppharness.Kind]int{eppharness.KindPdgate: 1, eppharness.KindStockGIE: 1, eppharness.KindFloor: 0} {
		h := o.harnessOptions(eppharness.Options{Kind: kind})
		if !h.Callgrind || len(h.ExtraArgs) != wantArgs || h.ReadyTimeout != instructionReady || o.MeterName() != "instructions" {
			t.Fatalf("%s: %+v", kind, h)
		}
	}
}
