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
