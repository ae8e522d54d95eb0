package decodepolicy

import (
	"math"
	"testing"
)

func TestNormalize(t *testing.T) {
	inf, nan := math.Inf(1), math.NaN()
	tests := []struct {
		in, want []float64
	}{
		{[]float64{}, []float64{}},
		{[]float64{5}, []float64{1}},
		{[]float64{2, 2}, []float64{1, 1}},
		{[]float64{1, 3, 2}, []float64{1, 0, 0.5}},
		{[]float64{1, inf, nan}, []float64{1, 0, 0}},
		{[]float64{nan, nan}, []float64{0, 0}},
		{[]float64{math.Inf(-1), 3}, []float64{1, 1}},
	}
	for _, tt := range tests {
		got := Normalize(tt.in)
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("Normalize(%v)=%v want %v", tt.in, got, tt.want)
				break
			}
		}
	}
}

// NormalizeFor keys each normalized score by its own endpoint, whatever the endpoints' order.
func TestNormalizeFor(t *testing.T) {
	got := NormalizeFor([]string{"c", "a", "b"}, []float64{2, 1, math.NaN()})
	want := map[string]float64{"c": 0, "a": 1, "b": 0}
	if len(got) != len(want) {
		t.Fatalf("NormalizeFor = %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Fatalf("NormalizeFor = %v, want %v", got, want)
		}
	}
	if got := NormalizeFor([]string{}, nil); len(got) != 0 {
		t.Fatalf("no endpoints: %v", got)
	}
}
