package report

import (
	"encoding/json"
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// PlotKind is how a plot draws its series.
type PlotKind string

const (
	// Lines joins each series' points (CDFs, latency vs load); the default.
	Lines PlotKind = "lines"
	// Points draws each point on its own.
	Points PlotKind = "points"
	// LinesPoints joins the points and marks each one (few points per series).
	LinesPoints PlotKind = "linespoints"
)

// Plot is one PNG chart.
type Plot struct {
	File   string   `json:"file"` // a .png file name, written next to the report
	Title  string   `json:"title"`
	XLabel string   `json:"xLabel"`
	YLabel string   `json:"yLabel"`
	Series []Series `json:"series"`
	LogX   bool     `json:"logX,omitempty"`
	LogY   bool     `json:"logY,omitempty"`
	Kind   PlotKind `json:"kind,omitempty"`
}

// Series is one named line or point set; X and Y have the same length.
type Series struct {
	Name string    `json:"name"`
	X    []float64 `json:"x"`
	Y    []float64 `json:"y"`
}

// MarshalJSON writes NaN and infinities (an empty percentile, a missing point) as null,
// which JSON can hold and encoding/json cannot produce from a float64.
func (s Series) MarshalJSON() ([]byte, error) {
	nullable := func(vs []float64) []*float64 {
		out := make([]*float64, len(vs))
		for i := range vs {
			if !bad(vs[i]) {
				out[i] = &vs[i]
			}
		}
		return out
	}
	return json.Marshal(struct {
		Name string     `json:"name"`
		X    []*float64 `json:"x"`
		Y    []*float64 `json:"y"`
	}{s.Name, nullable(s.X), nullable(s.Y)})
}

// UnmarshalJSON reads null back as NaN.
func (s *Series) UnmarshalJSON(b []byte) error {
	var raw struct {
		Name string     `json:"name"`
		X    []*float64 `json:"x"`
		Y    []*float64 `json:"y"`
	}
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	floats := func(ps []*float64) []float64 {
		out := make([]float64, len(ps))
		for i, p := range ps {
			out[i] = math.NaN()
			if p != nil {
				out[i] = *p
			}
		}
		return out
	}
	s.Name, s.X, s.Y = raw.Name, floats(raw.X), floats(raw.Y)
	return nil
}

func (p Plot) validate() error {
	if p.File == "" || filepath.Base(p.File) != p.File || !strings.HasSuffix(p.File, ".png") {
		return fmt.Errorf("plot %q: file must be a bare .png name", p.File)
	}
	switch p.Kind {
	case "", Lines, Points, LinesPoints:
	default:
		return fmt.Errorf("plot %s: unknown kind %q", p.File, p.Kind)
	}
	for _, s := range p.Series {
		if len(s.X) != len(s.Y) {
			return fmt.Errorf("plot %s: series %q has %d x and %d y values", p.File, s.Name, len(s.X), len(s.Y))
		}
	}
	return nil
}

// points drops what the axes cannot show (NaN, infinities, non-positive values on a log
// axis) rather than failing the whole report over one empty percentile.
func (p Plot) points(s Series) plotter.XYs {
	xys := make(plotter.XYs, 0, len(s.X))
	for i := range s.X {
		x, y := s.X[i], s.Y[i]
		if bad(x) || bad(y) || (p.LogX && x <= 0) || (p.LogY && y <= 0) {
			continue
		}
		xys = append(xys, plotter.XY{X: x, Y: y})
	}
	return xys
}

func bad(v float64) bool { return math.IsNaN(v) || math.IsInf(v, 0) }

func (p Plot) render(path string) (err error) {
	// gonum/plot reports some impossible axes by panicking; a report must fail with an
	// error instead, after a long benchmark run has produced its numbers.
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("rendering: %v", r)
		}
	}()
	pl := plot.New()
	pl.Title.Text = p.Title
	pl.X.Label.Text = p.XLabel
	pl.Y.Label.Text = p.YLabel
	pl.Add(plotter.NewGrid())
	if p.LogX {
		pl.X.Scale = plot.LogScale{}
		pl.X.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	if p.LogY {
		pl.Y.Scale = plot.LogScale{}
		pl.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	}
	// Top left is where CDFs and latency-vs-load curves leave room.
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.XOffs, pl.Legend.YOffs = vg.Points(8), vg.Points(-4)
	for i, s := range p.Series {
		xys := p.points(s)
		if len(xys) == 0 {
			continue
		}
		color := plotutil.Color(i)
		switch p.Kind {
		case Points:
			sc, err := plotter.NewScatter(xys)
			if err != nil {
				return err
			}
			sc.Color, sc.Shape = color, plotutil.Shape(i)
			pl.Add(sc)
			pl.Legend.Add(s.Name, sc)
		default:
			ln, err := plotter.NewLine(xys)
			if err != nil {
				return err
			}
			ln.Color, ln.Width = color, vg.Points(1.5)
			ln.Dashes = plotutil.Dashes(i / len(plotutil.SoftColors))
			pl.Add(ln)
			if p.Kind == LinesPoints {
				sc, err := plotter.NewScatter(xys)
				if err != nil {
					return err
				}
				sc.Color, sc.Shape = color, plotutil.Shape(i)
				pl.Add(sc)
				pl.Legend.Add(s.Name, ln, sc)
			} else {
				pl.Legend.Add(s.Name, ln)
			}
		}
	}
	// gonum's log axes cannot draw a range of one value (a single body size, one load
	// level): open the range to a decade around it.
	if p.LogX && pl.X.Min == pl.X.Max && pl.X.Min > 0 {
		pl.X.Min, pl.X.Max = pl.X.Min/math.Sqrt(10), pl.X.Max*math.Sqrt(10)
	}
	if p.LogY && pl.Y.Min == pl.Y.Max && pl.Y.Min > 0 {
		pl.Y.Min, pl.Y.Max = pl.Y.Min/math.Sqrt(10), pl.Y.Max*math.Sqrt(10)
	}
	return pl.Save(8*vg.Inch, 5*vg.Inch, path)
}
