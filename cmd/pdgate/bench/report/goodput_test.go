package report

import (
	"math"
	"testing"
	"time"
)

func TestAttainment(t *testing.T) {
	slo := SLO{Name: "s", TTFT: 100 * time.Millisecond, TPOT: 10 * time.Millisecond}
	nan := math.NaN()
	for _, tc := range []struct {
		name       string
		ttft, tpot []float64
		sent       int
		want       float64
	}{
		{"all good", []float64{50, 100}, []float64{5, 10}, 2, 1},
		{"TTFT miss", []float64{50, 100.5}, []float64{5, 5}, 2, 0.5},
		{"TPOT miss", []float64{50, 60}, []float64{5, 10.01}, 2, 0.5},
		{"both needed", []float64{150, 60, 20}, []float64{5, 20, 9}, 3, 1.0 / 3},
		{"failures are misses", []float64{10, 10}, []float64{1, 1}, 4, 0.5},
		{"single token: TTFT alone", []float64{10, 200}, []float64{nan, nan}, 2, 0.5},
		{"nothing sent", nil, nil, 0, 0},
		{"nothing served", nil, nil, 5, 0},
	} {
		if got := Attainment(tc.ttft, tc.tpot, tc.sent, slo); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Attainment = %v, want %v", tc.name, got, tc.want)
		}
	}
}

func TestMaxRateAt(t *testing.T) {
	pts := func(xy ...float64) []RatePoint {
		var out []RatePoint
		for i := 0; i < len(xy); i += 2 {
			out = append(out, RatePoint{Rate: xy[i], Attainment: xy[i+1]})
		}
		return out
	}
	for _, tc := range []struct {
		name  string
		pts   []RatePoint
		want  MaxRate
		value float64
	}{
		{"interpolated halfway", pts(1, 1.0, 2, 0.95, 3, 0.85, 4, 0.2), MaxRate{Rate: 2.5}, 2.5},
		{"interpolated a quarter", pts(2, 1.0, 4, 0.6), MaxRate{Rate: 2.5}, 2.5},
		{"unsorted input", pts(3, 0.85, 1, 1.0, 4, 0.2, 2, 0.95), MaxRate{Rate: 2.5}, 2.5},
		{"exactly at target counts", pts(1, 0.9, 2, 0.9, 3, 0.5), MaxRate{Rate: 2}, 2},
		{"first crossing wins over a later recovery", pts(1, 1, 2, 0.8, 3, 0.95), MaxRate{Rate: 1.5}, 1.5},
		{"below target at the lowest rate", pts(1, 0.5, 2, 0.4), MaxRate{Rate: 1, Bound: "<"}, 0},
		{"never below target", pts(1, 1, 2, 0.99), MaxRate{Rate: 2, Bound: "≥"}, 2},
		{"one point, good", pts(3, 0.95), MaxRate{Rate: 3, Bound: "≥"}, 3},
	} {
		got := MaxRateAt(tc.pts, GoodputTarget)
		if got.Bound != tc.want.Bound || math.Abs(got.Rate-tc.want.Rate) > 1e-9 {
			t.Errorf("%s: MaxRateAt = %+v, want %+v", tc.name, got, tc.want)
		}
		if math.Abs(got.Value()-tc.value) > 1e-9 {
			t.Errorf("%s: Value = %v, want %v", tc.name, got.Value(), tc.value)
		}
	}
	if got := MaxRateAt(nil, 0.9); got.Bound != "<" || got.Value() != 0 {
		t.Errorf("no points: %+v", got)
	}
}

func TestParseSLOs(t *testing.T) {
	got, err := ParseSLOs("interactive=200ms/10ms, relaxed=1s/50ms")
	if err != nil {
		t.Fatal(err)
	}
	want := []SLO{{"interactive", 200 * time.Millisecond, 10 * time.Millisecond}, {"relaxed", time.Second, 50 * time.Millisecond}}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("ParseSLOs = %+v, want %+v", got, want)
	}
	if s := got[0].String(); s != "interactive (TTFT ≤ 200 ms, TPOT ≤ 10 ms)" {
		t.Errorf("String = %q", s)
	}
	if s := (SLO{Name: "r", TTFT: 1500 * time.Millisecond, TPOT: 10500 * time.Microsecond}).String(); s != "r (TTFT ≤ 1.5 s, TPOT ≤ 10.5 ms)" {
		t.Errorf("String = %q", s)
	}
	for _, bad := range []string{"", "x", "x=1s", "=1s/2ms", "x=1s/0s", "x=-1s/2ms", "x=1s/2ms,x=2s/3ms", "x=abc/2ms"} {
		if _, err := ParseSLOs(bad); err == nil {
			t.Errorf("ParseSLOs(%q): no error", bad)
		}
	}
}
