package softreflectiveceiling

import (
	"context"
	"encoding/json"
	"testing"
)

func TestComputeLimit(t *testing.T) {
	tests := []struct {
		name       string
		s          float64
		priorities []int
		want       []float64
	}{
		{"one band is never gated", 2.0, []int{0}, []float64{1}},
		{"idle pool: everything open", 0.1, []int{10, 0, -10}, []float64{1, 1, 1}},
		{"saturated: only the top band", 1.0, []int{10, 0, -10}, []float64{1, 0, 0}},
		// N=3, s=0.4: band 1 r=0.8 open; band 2 r=0.6 open.
		{"moderate", 0.4, []int{10, 0, -10}, []float64{1, 1, 1}},
		// s=0.45: band 2 r=0.55 open; s=0.55: band 1 r=0.725 open, band 2 r=0.45 → alternating,
		// first call (tick 0) open.
		{"alternation starts open", 0.55, []int{10, 0, -10}, []float64{1, 1, 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := New("p").ComputeLimit(context.Background(), tt.s, tt.priorities)
			for i := range tt.want {
				if got[i] != tt.want[i] {
					t.Fatalf("ceilings %v, want %v", got, tt.want)
				}
			}
		})
	}
}

// At s = 0.75 the period is round(0.75/0.25) = 3: the gated band is open on one call in 3.
func TestAlternation(t *testing.T) {
	p := New("p")
	open := 0
	for i := 0; i < 30; i++ {
		if p.ComputeLimit(context.Background(), 0.75, []int{1, 0})[1] == 1 {
			open++
		}
	}
	if open != 10 {
		t.Fatalf("open %d of 30 calls, want 10", open)
	}
}

func TestParameters(t *testing.T) {
	for _, ok := range []string{``, `{}`, `null`} {
		if _, err := Factory("p", json.RawMessage(ok), nil); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	if _, err := Factory("p", json.RawMessage(`{"threshold":1}`), nil); err == nil {
		t.Error("a parameter was accepted")
	}
}
