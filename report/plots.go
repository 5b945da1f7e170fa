package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/himes-rl/himes/grpo"
)

// Figure is one rendered PNG.
type Figure struct {
	Name    string // file stem, e.g. "reward"
	Title   string
	Caption string
	PNG     []byte
}

// palette is Okabe–Ito: distinguishable with common colour-vision deficiencies.
var palette = []color.NRGBA{
	{0, 114, 178, 255},   // blue
	{213, 94, 0, 255},    // vermillion
	{0, 158, 115, 255},   // bluish green
	{204, 121, 167, 255}, // reddish purple
	{230, 159, 0, 255},   // orange
	{86, 180, 233, 255},  // sky blue
	{0, 0, 0, 255},       // black
}

func runColor(i int) color.NRGBA { return palette[i%len(palette)] }

func faded(c color.NRGBA) color.NRGBA { c.A = 70; return c }

const dpi = 110

// panel is one subplot: a metric of the step lines.
type panel struct {
	title string
	get   func(grpo.StepMetrics) float64
	unit  bool // a fraction: fix the y range to [0, 1]
}

// evalPanel is one subplot of the eval lines: policy solid, raw dashed.
type evalPanel struct {
	title string
	get   func(grpo.EvalSystem) float64
}

// Figures renders every figure the runs have data for, in a fixed order.
func Figures(runs []Run) ([]Figure, error) {
	var figs []Figure
	add := func(name, title, caption string, png []byte, err error) error {
		if err != nil {
			return fmt.Errorf("figure %s: %w", name, err)
		}
		if png != nil {
			figs = append(figs, Figure{Name: name, Title: title, Caption: caption, PNG: png})
		}
		return nil
	}
	steps := []struct {
		name, title, caption string
		panels               []panel
		cols                 int
	}{
		{"reward", "Reward", "Mean HSER reward of the step's valid rollouts (faint: per step; bold: centred moving average).",
			[]panel{{"reward (mean over rollouts)", func(m grpo.StepMetrics) float64 { return m.RewardMean }, false}}, 1},
		{"terms", "Reward terms", "Means of each reward term over the step's valid rollouts. EM (reward) is normalized as reward.tokenizer says; SQuAD EM and F1 are the official SQuAD v1.1 numbers (reported, not rewarded).",
			[]panel{
				{"Rouge-L F1", func(m grpo.StepMetrics) float64 { return m.Terms.RougeLF1 }, false},
				{"EM (reward)", func(m grpo.StepMetrics) float64 { return m.Terms.EM }, false},
				{"hit", func(m grpo.StepMetrics) float64 { return m.Terms.Hit }, false},
				{"SQuAD EM", func(m grpo.StepMetrics) float64 { return m.Terms.SquadEM }, false},
				{"SQuAD F1", func(m grpo.StepMetrics) float64 { return m.Terms.SquadF1 }, false},
				{"guard penalty", func(m grpo.StepMetrics) float64 { return m.Terms.GuardPenalty }, false},
			}, 2},
		{"kl", "KL to the reference policy", "KL divergence reported by the trainer for the step's update.",
			[]panel{{"KL", func(m grpo.StepMetrics) float64 { return m.KL }, false}}, 1},
		{"zero_variance", "Zero-variance groups", "Share of groups whose rewards (or one term) are all equal: they carry no GRPO signal.",
			[]panel{
				{"total reward", func(m grpo.StepMetrics) float64 { return m.ZeroVarFrac }, true},
				{"Rouge-L", func(m grpo.StepMetrics) float64 { return m.ZeroVarFracRougeL }, true},
				{"EM (reward)", func(m grpo.StepMetrics) float64 { return m.ZeroVarFracEM }, true},
				{"hit", func(m grpo.StepMetrics) float64 { return m.ZeroVarFracHit }, true},
			}, 2},
		{"optimization", "Optimization", "Policy loss, gradient norm, token entropy and rewrite length per step.",
			[]panel{
				{"loss", func(m grpo.StepMetrics) float64 { return m.Loss }, false},
				{"grad norm", func(m grpo.StepMetrics) float64 { return m.GradNorm }, false},
				{"entropy", func(m grpo.StepMetrics) float64 { return m.Entropy }, false},
				{"rewrite length (words)", func(m grpo.StepMetrics) float64 { return m.RewriteLenMean }, false},
			}, 2},
	}
	for _, s := range steps {
		png, err := stepFigure(runs, s.panels, s.cols)
		if err := add(s.name, s.title, s.caption, png, err); err != nil {
			return nil, err
		}
	}
	png, err := sftFigure(runs)
	if err := add("sft", "SFT phase", "Supervised loss per epoch of the SFT phase that precedes GRPO.", png, err); err != nil {
		return nil, err
	}
	png, err = evalFigure(runs, []evalPanel{
		{"eval reward", func(e grpo.EvalSystem) float64 { return e.Reward }},
		{"eval Recall@10", func(e grpo.EvalSystem) float64 { return e.Recall10 }},
		{"eval MRR", func(e grpo.EvalSystem) float64 { return e.MRR }},
		{"eval SQuAD F1", func(e grpo.EvalSystem) float64 { return e.SquadF1 }},
	})
	if err := add("eval", "Held-out evaluation", "Greedy policy rewrites (solid, dots) against the raw question (dashed) at each evaluation.", png, err); err != nil {
		return nil, err
	}
	return figs, nil
}

func stepFigure(runs []Run, panels []panel, cols int) ([]byte, error) {
	hasData := false
	for _, r := range runs {
		hasData = hasData || len(r.Steps) > 0
	}
	if !hasData {
		return nil, nil
	}
	plots := make([]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := newPlot(pn.title, "step")
		entries := 0
		for ri, r := range runs {
			if len(r.Steps) == 0 {
				continue
			}
			xy := make(plotter.XYs, 0, len(r.Steps))
			for _, m := range r.Steps {
				if v := pn.get(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
					xy = append(xy, plotter.XY{X: float64(m.Step), Y: v})
				}
			}
			if len(xy) == 0 {
				continue
			}
			c := runColor(ri)
			smooth := movingAverage(xy)
			if smooth != nil {
				raw, err := plotter.NewLine(xy)
				if err != nil {
					return nil, err
				}
				raw.Color, raw.Width = faded(c), vg.Points(1)
				p.Add(raw)
				xy = smooth
			}
			l, err := plotter.NewLine(xy)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(2)
			p.Add(l)
			if pi == 0 {
				p.Legend.Add(r.Name, l)
				entries++
			}
		}
		if pn.unit {
			p.Y.Min, p.Y.Max = 0, 1
		}
		if pi == 0 {
			legendRoom(p, entries)
		}
		plots[pi] = p
	}
	return render(plots, cols)
}

func evalFigure(runs []Run, panels []evalPanel) ([]byte, error) {
	hasData := false
	for _, r := range runs {
		hasData = hasData || len(r.Evals) > 0
	}
	if !hasData {
		return nil, nil
	}
	// When the runs agree on the raw baseline wherever they share a step
	// (the usual case: same eval set), draw it once in grey.
	shared, sharedXY := sharedRaw(runs, panels)
	plots := make([]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := newPlot(pn.title, "step")
		entries := 0
		// Baselines are drawn last, dashed over the policy lines, so they
		// stay visible where the policy still equals them.
		var sharedLine *plotter.Line
		var rawLines []*plotter.Line
		if shared {
			rl, err := plotter.NewLine(sharedXY[pi])
			if err != nil {
				return nil, err
			}
			rl.Width, rl.Dashes = vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(3)}
			rl.Color = color.NRGBA{60, 60, 60, 255}
			sharedLine = rl
			if pi == 0 {
				p.Legend.Add("raw question", rl)
				entries++
			}
		}
		for ri, r := range runs {
			if len(r.Evals) == 0 {
				continue
			}
			pol := make(plotter.XYs, len(r.Evals))
			raw := make(plotter.XYs, len(r.Evals))
			for i, e := range r.Evals {
				pol[i] = plotter.XY{X: float64(e.Step), Y: pn.get(e.Policy)}
				raw[i] = plotter.XY{X: float64(e.Step), Y: pn.get(e.Raw)}
			}
			c := runColor(ri)
			if !shared {
				rl, err := plotter.NewLine(raw)
				if err != nil {
					return nil, err
				}
				rl.Width, rl.Dashes = vg.Points(1.5), []vg.Length{vg.Points(5), vg.Points(3)}
				rl.Color = c
				rawLines = append(rawLines, rl)
				if pi == 0 {
					p.Legend.Add(r.Name+" raw", rl)
					entries++
				}
			}
			l, pts, err := plotter.NewLinePoints(pol)
			if err != nil {
				return nil, err
			}
			l.Color, l.Width = c, vg.Points(2)
			pts.Color, pts.Shape, pts.Radius = c, draw.CircleGlyph{}, vg.Points(2.5)
			p.Add(l, pts)
			if pi == 0 {
				p.Legend.Add(r.Name+" policy", l, pts)
				entries++
			}
		}
		if sharedLine != nil {
			rawLines = append(rawLines, sharedLine)
		}
		for _, rl := range rawLines {
			p.Add(rl)
		}
		if pi == 0 {
			legendRoom(p, entries)
		}
		plots[pi] = p
	}
	return render(plots, 2)
}

// sftFigure plots the SFT loss per epoch; nil when no run had an SFT phase.
func sftFigure(runs []Run) ([]byte, error) {
	p := newPlot("SFT loss", "epoch")
	entries := 0
	for ri, r := range runs {
		if len(r.SFT) == 0 {
			continue
		}
		xy := make(plotter.XYs, len(r.SFT))
		for i, m := range r.SFT {
			xy[i] = plotter.XY{X: float64(m.Epoch), Y: m.Loss}
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return nil, err
		}
		c := runColor(ri)
		l.Color, l.Width = c, vg.Points(2)
		pts.Color, pts.Shape, pts.Radius = c, draw.CircleGlyph{}, vg.Points(2.5)
		p.Add(l, pts)
		p.Legend.Add(r.Name, l, pts)
		entries++
	}
	if entries == 0 {
		return nil, nil
	}
	legendRoom(p, entries)
	return render([]*plot.Plot{p}, 1)
}

// sharedRaw reports whether all runs with evals agree on the raw baseline at
// every step they share, and if so returns its merged series per panel.
func sharedRaw(runs []Run, panels []evalPanel) (bool, []plotter.XYs) {
	byStep := map[int]grpo.EvalSystem{}
	for _, r := range runs {
		for _, e := range r.Evals {
			if prev, ok := byStep[e.Step]; ok && prev != e.Raw {
				return false, nil
			}
			byStep[e.Step] = e.Raw
		}
	}
	steps := make([]int, 0, len(byStep))
	for s := range byStep {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	out := make([]plotter.XYs, len(panels))
	for pi, pn := range panels {
		for _, s := range steps {
			out[pi] = append(out[pi], plotter.XY{X: float64(s), Y: pn.get(byStep[s])})
		}
	}
	return true, out
}

// legendRoom raises the top of the y axis so the legend, drawn top left,
// sits above the data instead of over it.
func legendRoom(p *plot.Plot, n int) {
	if n == 0 {
		return
	}
	span := p.Y.Max - p.Y.Min
	if span <= 0 {
		span = math.Max(math.Abs(p.Y.Max), 1) * 0.1
	}
	p.Y.Max += span * 0.09 * float64(n)
}

func newPlot(title, xlabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = xlabel
	p.X.Min = 0
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.X.Tick.Label.Font.Size = vg.Points(10)
	p.Y.Tick.Label.Font.Size = vg.Points(10)
	p.Legend.TextStyle.Font.Size = vg.Points(10)
	p.Legend.Top = true
	p.Legend.Left = true
	p.Legend.Padding = vg.Points(2)
	g := plotter.NewGrid()
	g.Horizontal.Color = color.Gray{Y: 225}
	g.Vertical.Color = color.Gray{Y: 225}
	p.Add(g)
	return p
}

// movingAverage returns a centred moving average when the series is long
// enough for noise to hide the trend (about 1/25 of its length each side),
// and nil otherwise.
func movingAverage(xy plotter.XYs) plotter.XYs {
	half := len(xy) / 50
	if half < 1 {
		return nil
	}
	out := make(plotter.XYs, len(xy))
	for i := range xy {
		lo, hi := max(0, i-half), min(len(xy)-1, i+half)
		var s float64
		for j := lo; j <= hi; j++ {
			s += xy[j].Y
		}
		out[i] = plotter.XY{X: xy[i].X, Y: s / float64(hi-lo+1)}
	}
	return out
}

// render lays the plots out in a grid of cols columns and encodes a PNG.
func render(plots []*plot.Plot, cols int) ([]byte, error) {
	rows := (len(plots) + cols - 1) / cols
	w := vg.Length(cols) * 4.8 * vg.Inch
	h := vg.Length(rows) * 3.2 * vg.Inch
	if cols == 1 && rows == 1 {
		w, h = 8*vg.Inch, 4*vg.Inch
	}
	img := vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(dpi), vgimg.UseBackgroundColor(color.White))
	dc := draw.New(img)
	grid := make([][]*plot.Plot, rows)
	for r := range grid {
		grid[r] = make([]*plot.Plot, cols)
		for c := range cols {
			if i := r*cols + c; i < len(plots) {
				grid[r][c] = plots[i]
			}
		}
	}
	t := draw.Tiles{Rows: rows, Cols: cols, PadX: vg.Points(14), PadY: vg.Points(10),
		PadTop: vg.Points(6), PadBottom: vg.Points(6), PadLeft: vg.Points(6), PadRight: vg.Points(10)}
	canvases := plot.Align(grid, t, dc)
	for r := range grid {
		for c := range grid[r] {
			if grid[r][c] != nil {
				grid[r][c].Draw(canvases[r][c])
			}
		}
	}
	var buf bytes.Buffer
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(&buf); err != nil {
		return nil, fmt.Errorf("encode png: %w", err)
	}
	return buf.Bytes(), nil
}
