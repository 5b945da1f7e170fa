package report

import (
	"fmt"
	"image/color"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// BarSeries is one system across the groups of a bar chart, with the 95%
// interval of each bar.
type BarSeries struct {
	Name          string
	Mean, Lo, Hi  []float64 // one per group; NaN for a missing bar
	HideIntervals bool
}

// BarChart renders grouped bars (one group per label, one bar per series)
// with interval whiskers, as a PNG. The y axis starts at 0: the bars are
// shares (recall, MRR), and a truncated axis would exaggerate differences;
// it reaches below 0 only for negative bars or whiskers (differences).
func BarChart(title, ylabel string, groups []string, series []BarSeries) ([]byte, error) {
	if len(groups) == 0 || len(series) == 0 {
		return nil, fmt.Errorf("bar chart %q: nothing to plot", title)
	}
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.Y.Label.Text = ylabel
	p.Y.Min = 0
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	g := plotter.NewGrid()
	g.Vertical.Color = color.Transparent
	g.Horizontal.Color = color.Gray{Y: 225}
	p.Add(g)

	// Bars sit at data x = group + offset, so the whiskers (drawn in data
	// units) land on them; the bar width in points follows from the 8-inch
	// canvas of render's single-plot layout (about 500 points of x axis).
	step := 0.8 / float64(len(series))
	width := vg.Points(0.9 * step * 500 / (float64(len(groups)) + 0.2))
	ymax, ymin := 0.0, 0.0
	for i, s := range series {
		if len(s.Mean) != len(groups) || len(s.Lo) != len(groups) || len(s.Hi) != len(groups) {
			return nil, fmt.Errorf("bar chart %q: series %s has %d values for %d groups", title, s.Name, len(s.Mean), len(groups))
		}
		vals := make(plotter.Values, len(groups))
		for k, v := range s.Mean {
			vals[k] = v
			if v != v { // NaN: no bar
				vals[k] = 0
			}
			ymax, ymin = max(ymax, vals[k]), min(ymin, vals[k])
			if hi := s.Hi[k]; hi == hi && !s.HideIntervals {
				ymax = max(ymax, hi)
			}
			if lo := s.Lo[k]; lo == lo && !s.HideIntervals {
				ymin = min(ymin, lo)
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, fmt.Errorf("bar chart %q: %w", title, err)
		}
		bars.LineStyle.Width = vg.Length(0)
		bars.Color = plotutil.Color(i)
		off := (float64(i) - float64(len(series)-1)/2) * step
		bars.XMin = off
		p.Add(bars)
		p.Legend.Add(s.Name, bars)
		if s.HideIntervals {
			continue
		}
		var errs plotter.XYs
		var yerr plotter.YErrors
		for k := range groups {
			if s.Mean[k] != s.Mean[k] {
				continue
			}
			errs = append(errs, plotter.XY{X: float64(k) + off, Y: s.Mean[k]})
			yerr = append(yerr, struct{ Low, High float64 }{s.Mean[k] - s.Lo[k], s.Hi[k] - s.Mean[k]})
		}
		if len(errs) == 0 {
			continue
		}
		eb, err := plotter.NewYErrorBars(struct {
			plotter.XYs
			plotter.YErrors
		}{errs, yerr})
		if err != nil {
			return nil, fmt.Errorf("bar chart %q: %w", title, err)
		}
		eb.LineStyle.Width = vg.Points(1)
		p.Add(eb)
	}
	p.NominalX(groups...)
	p.X.Min, p.X.Max = -0.5, float64(len(groups))-0.5
	p.Y.Max = ymax * (1.12 + 0.06*float64(len(series)))
	if ymin < 0 {
		p.Y.Min = ymin * 1.12
		if ymax == 0 { // room above 0 for the legend
			p.Y.Max = -ymin * (0.12 + 0.06*float64(len(series)))
		}
	}
	return render([]*plot.Plot{p}, 1)
}
