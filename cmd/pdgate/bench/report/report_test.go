package report

import (
	"encoding/json"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestCDF(t *testing.T) {
	tests := []struct {
		in    []float64
		wantX []float64
		wantY []float64
	}{
		{in: nil},
		{in: []float64{3, 1, 2, 4}, wantX: []float64{1, 2, 3, 4}, wantY: []float64{0.25, 0.5, 0.75, 1}},
		{in: []float64{2, 1, 2, 2}, wantX: []float64{1, 2}, wantY: []float64{0.25, 1}},
	}
	for _, tt := range tests {
		x, y := CDF(tt.in)
		if !slices.Equal(x, tt.wantX) || !slices.Equal(y, tt.wantY) {
			t.Errorf("CDF(%v) = %v %v, want %v %v", tt.in, x, y, tt.wantX, tt.wantY)
		}
	}
}

func TestPercentile(t *testing.T) {
	s := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	tests := []struct {
		p    float64
		want float64
	}{{0, 1}, {10, 1}, {11, 2}, {50, 5}, {90, 9}, {99, 10}, {100, 10}}
	for _, tt := range tests {
		if got := Percentile(s, tt.p); got != tt.want {
			t.Errorf("Percentile(p%v) = %v, want %v", tt.p, got, tt.want)
		}
	}
	if !math.IsNaN(Percentile(nil, 50)) {
		t.Error("empty input must give NaN")
	}
}

func TestF(t *testing.T) {
	if F(1.2345, 2) != "1.23" || F(math.NaN(), 1) != "–" || F(math.Inf(1), 0) != "–" {
		t.Errorf("F: %q %q %q", F(1.2345, 2), F(math.NaN(), 1), F(math.Inf(1), 0))
	}
}

func TestWriteProducesJSONMarkdownAndPNG(t *testing.T) {
	dir := t.TempDir()
	r := New("demo", "Demo bench")
	r.Data = map[string]float64{"rps": 12.5}
	x, y := CDF([]float64{5, 1, 3, 8, 2})
	r.Add(Section{
		Title:  "Throughput",
		Text:   "Requests per second.",
		Tables: []Table{{Columns: []string{"config", "req/s|x"}, Rows: [][]string{{"a", "12.5"}}}},
		Plots: []Plot{
			{File: "cdf.png", Title: "TTFT CDF", XLabel: "ms", YLabel: "share", LogX: true, Series: []Series{{Name: "a", X: x, Y: y}, {Name: "empty"}}},
			{File: "one.png", Title: "one x on log axes", LogX: true, LogY: true, Kind: LinesPoints, Series: []Series{{Name: "a", X: []float64{1}, Y: []float64{1500}}, {Name: "b", X: []float64{1}, Y: []float64{1400}}}},
			{File: "load.png", Title: "p99 vs load", Kind: LinesPoints, Series: []Series{{Name: "a", X: []float64{50, 80, 100}, Y: []float64{1, math.NaN(), 3}}}},
		},
	})
	md, err := r.Write(dir)
	if err != nil {
		t.Fatal(err)
	}
	text, _ := os.ReadFile(md)
	for _, want := range []string{"# Demo bench", "## Throughput", "| config | req/s\\|x |", "| a | 12.5 |", "![TTFT CDF](cdf.png)"} {
		if !strings.Contains(string(text), want) {
			t.Errorf("markdown lacks %q:\n%s", want, text)
		}
	}
	var back Report
	js, _ := os.ReadFile(filepath.Join(dir, "demo.json"))
	if err := json.Unmarshal(js, &back); err != nil || back.Name != "demo" || back.Machine.CPUs < 1 || back.Data.(map[string]any)["rps"] != 12.5 {
		t.Errorf("json round trip: %v %+v", err, back)
	}
	if y := back.Sections[0].Plots[2].Series[0].Y; len(y) != 3 || !math.IsNaN(y[1]) || y[2] != 3 {
		t.Errorf("a NaN point must survive the JSON round trip as NaN: %v", y)
	}
	for _, f := range []string{"cdf.png", "one.png", "load.png"} {
		fh, err := os.Open(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(fh)
		fh.Close()
		if err != nil || img.Bounds().Dx() < 100 {
			t.Errorf("%s: not a usable PNG: %v", f, err)
		}
	}
}

func TestWriteRejectsMalformedReports(t *testing.T) {
	tests := []struct {
		name string
		s    Section
		want string
	}{
		{"ragged row", Section{Title: "s", Tables: []Table{{Title: "t", Columns: []string{"a", "b"}, Rows: [][]string{{"1"}}}}}, `row 0 has 1 cells, want 2`},
		{"path in plot file", Section{Plots: []Plot{{File: "../x.png"}}}, "bare .png name"},
		{"mismatched series", Section{Plots: []Plot{{File: "x.png", Series: []Series{{Name: "s", X: []float64{1}}}}}}, `series "s" has 1 x and 0 y`},
		{"duplicate plot file", Section{Plots: []Plot{{File: "x.png"}, {File: "x.png"}}}, "used twice"},
		{"unknown kind", Section{Plots: []Plot{{File: "x.png", Kind: "bars"}}}, `unknown kind "bars"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			r := New("bad", "Bad")
			r.Add(tt.s)
			if _, err := r.Write(dir); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("got %v, want an error containing %q", err, tt.want)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 0 {
				t.Errorf("a rejected report wrote %d files", len(entries))
			}
		})
	}
}
