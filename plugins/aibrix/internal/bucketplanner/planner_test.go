package bucketplanner

import (
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func TestBin(t *testing.T) {
	tests := []struct{ n, bin int }{
		{-3, 0}, {0, 0}, {1, 0}, {2, 8}, {3, 12}, {4, 16}, {1024, 80}, {1 << 21, 167}, {1 << 30, 167},
	}
	for _, tt := range tests {
		if got := Bin(tt.n); got != tt.bin {
			t.Errorf("Bin(%d)=%d want %d", tt.n, got, tt.bin)
		}
	}
	if BinCentre(0) != 1 || BinCentre(80) != int(math.Round(math.Pow(2, 80.5/8))) {
		t.Errorf("centres %d %d", BinCentre(0), BinCentre(80))
	}
}

func vecAt(points map[int]float64) []float64 {
	v := make([]float64, NumBins)
	for n, w := range points {
		v[Bin(n)] += w
	}
	return v
}

func TestComputeSegmentsAndBands(t *testing.T) {
	tests := []struct {
		name   string
		groups []Group
		vec    []float64
		want   []Band
	}{
		{name: "no traffic, no plan", groups: []Group{{Name: "a", Replicas: 1}, {Name: "b", Replicas: 1}}, vec: make([]float64, NumBins)},
		{name: "disjoint ranges need no split", groups: []Group{{Name: "a", Min: 0, Max: 100, Replicas: 1}, {Name: "b", Min: 101, Replicas: 1}},
			vec: vecAt(map[int]float64{50: 10, 500: 10})},
		{name: "shared range split by replicas", groups: []Group{{Name: "a", Replicas: 1}, {Name: "b", Replicas: 1}},
			vec:  vecAt(map[int]float64{100: 10, 1000: 10}),
			want: []Band{{Min: 0, Max: BinCentre(Bin(100)), Roleset: "a"}, {Min: BinCentre(Bin(100)) + 1, Max: openMax, Roleset: "b"}}},
		{name: "exclusive traffic covers a's share: b takes the shared segment alone",
			groups: []Group{{Name: "a", Min: 0, Max: 0, Replicas: 1}, {Name: "b", Min: 0, Max: 1000, Replicas: 1}},
			vec:    vecAt(map[int]float64{100: 10, 5000: 10}),
			want:   []Band{{Min: 0, Max: 1000, Roleset: "b"}}},
		{name: "tiny shared share below 5% is not split", groups: []Group{{Name: "a", Min: 0, Max: 0, Replicas: 1}, {Name: "b", Min: 0, Max: 1000, Replicas: 1}},
			vec: vecAt(map[int]float64{100: 1, 5000: 99})},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Compute(tt.groups, tt.vec)
			if len(got) != len(tt.want) {
				t.Fatalf("got %v want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] {
					t.Fatalf("got %v want %v", got, tt.want)
				}
			}
		})
	}
}

func TestReplicaProportionalCuts(t *testing.T) {
	// Uniform traffic over 64 bins, a has 3 replicas, b has 1: a's band carries ~3/4 of it.
	vec := make([]float64, NumBins)
	for b := 40; b < 104; b++ {
		vec[b] = 1
	}
	bands := Compute([]Group{{Name: "a", Replicas: 3}, {Name: "b", Replicas: 1}}, vec)
	if len(bands) != 2 || bands[0].Roleset != "a" || bands[1].Roleset != "b" {
		t.Fatalf("bands %v", bands)
	}
	share := 0.0
	for b := 40; b < 104; b++ {
		if BinCentre(b) <= bands[0].Max {
			share++
		}
	}
	if share/64 < 0.70 || share/64 > 0.80 {
		t.Fatalf("a's share %.2f, want about 0.75 (bands %v)", share/64, bands)
	}
	if bands[0].Max+1 != bands[1].Min {
		t.Fatalf("bands must be contiguous: %v", bands)
	}
}

func TestBandBudget(t *testing.T) {
	// 20 rolesets sharing one range: at most 16 bands.
	var groups []Group
	for i := 0; i < 20; i++ {
		groups = append(groups, Group{Name: string(rune('a' + i)), Replicas: 1})
	}
	vec := make([]float64, NumBins)
	for b := 0; b < NumBins; b++ {
		vec[b] = 1
	}
	if got := Compute(groups, vec); len(got) != MaxBands {
		t.Fatalf("got %d bands, want %d", len(got), MaxBands)
	}
}

func TestPlannerRefreshDecayAndMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg)
	p := New(m)
	t0 := time.Unix(1000, 0)
	groups := []Group{{Name: "a", Replicas: 1}, {Name: "b", Replicas: 1}}
	for i := 0; i < 10; i++ {
		p.Observe("m", 100, t0)
		p.Observe("m", 1000, t0)
	}
	b, ok := p.Band("m", "throughput", groups, 100, t0)
	if !ok {
		t.Fatal("expected a band")
	}
	// Within the refresh interval the cached plan is used even though traffic changed.
	for i := 0; i < 1000; i++ {
		p.Observe("m", 100000, t0.Add(time.Second))
	}
	b2, _ := p.Band("m", "throughput", groups, 100, t0.Add(RefreshInterval-time.Millisecond))
	if b2 != b {
		t.Fatalf("plan changed before refresh: %v → %v", b, b2)
	}
	b3, _ := p.Band("m", "throughput", groups, 100, t0.Add(RefreshInterval))
	if b3 == b {
		t.Fatalf("plan did not refresh: %v", b3)
	}
	if seriesCount(t, reg, "pdgate_bucket_serve_band_max") == 0 {
		t.Fatal("band max gauge not published")
	}
	p.RecordBanded("a", 100)
	if v := testutil.ToFloat64(m.tokensTotal.WithLabelValues("a")); v != 100 {
		t.Fatalf("tokens %v", v)
	}
	// Half-life: after 30 s, weights halve.
	h := &histogram{}
	h.decay(t0)
	h.weights[3] = 8
	h.decay(t0.Add(HalfLife))
	if h.weights[3] != 4 {
		t.Fatalf("decay %v", h.weights[3])
	}
	// A roleset leaving every plan loses its gauge series.
	p2 := New(m)
	p2.Observe("m", 10, t0)
	p2.Band("m", "rps", []Group{{Name: "z", Replicas: 1}, {Name: "y", Replicas: 1}}, 10, t0)
	if hasLabel(t, reg, "pdgate_bucket_serve_band_max", "a") || !hasLabel(t, reg, "pdgate_bucket_serve_band_max", "y") {
		t.Fatal("band max series must follow the current plans")
	}
}

func TestLookup(t *testing.T) {
	p := &Plan{Bands: []Band{{0, 10, "a"}, {11, 20, "b"}, {30, 40, "c"}}}
	tests := []struct {
		n    int
		want string
		ok   bool
	}{{0, "a", true}, {10, "a", true}, {11, "b", true}, {25, "", false}, {40, "c", true}, {41, "", false}}
	for _, tt := range tests {
		b, ok := p.Lookup(tt.n)
		if ok != tt.ok || b.Roleset != tt.want {
			t.Errorf("Lookup(%d)=%v,%v", tt.n, b, ok)
		}
	}
}

func seriesCount(t *testing.T, reg *prometheus.Registry, name string) int {
	t.Helper()
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() == name {
			return len(f.GetMetric())
		}
	}
	return 0
}

func hasLabel(t *testing.T, reg *prometheus.Registry, name, roleset string) bool {
	t.Helper()
	fams, _ := reg.Gather()
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "roleset" && l.GetValue() == roleset {
					return true
				}
			}
		}
	}
	return false
}
