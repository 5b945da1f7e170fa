package report

import (
	"bytes"
	"fmt"
	"image/color"
	"math"
	"reflect"
	"sort"
	"strconv"
	"strings"

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
	title, ylabel string
	// get returns NaN where the metric was not computed (grpo.Val).
	get func(grpo.StepMetrics) float64
	// share: a fraction, drawn on a y axis from 0 to 1.
	share bool
}

// evalPanel is one subplot of the eval lines: policy solid with its 95%
// bootstrap interval shaded, raw question dashed.
type evalPanel struct {
	title, ylabel string
	get           func(grpo.EvalSystem) (float64, *grpo.Interval)
	share         bool
}

func term(get func(grpo.Terms) float64) func(grpo.StepMetrics) float64 {
	return func(m grpo.StepMetrics) float64 {
		if m.Terms == nil {
			return math.NaN()
		}
		return get(*m.Terms)
	}
}

const notComputed = "absent where not computed, never drawn as 0"

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
	smoothing := "Faint: the value at each step; bold: its centred moving average over the window the legend states."
	perStep := "One point per step (a moving average is drawn from 50 steps on)."
	steps := []struct {
		name, title, caption string
		panels               []panel
		cols                 int
	}{
		{"reward", "Reward", "Mean HSER reward (Rouge-L F1 + α·EM + β·Hit) of the step's valid rollouts. " + smoothing,
			[]panel{{"reward", "mean reward per rollout", func(m grpo.StepMetrics) float64 { return grpo.Val(m.RewardMean) }, false}}, 1},
		{"terms", "Reward terms", "Means of each reward term over the step's valid rollouts. EM (reward) is normalized as reward.tokenizer says; SQuAD EM and F1 are the official SQuAD v1.1 numbers (reported, not rewarded). " + smoothing,
			[]panel{
				{"Rouge-L F1", "F1 (0–1)", term(func(t grpo.Terms) float64 { return t.RougeLF1 }), true},
				{"EM (reward)", "share of rollouts", term(func(t grpo.Terms) float64 { return t.EM }), true},
				{"hit", "share of rollouts", term(func(t grpo.Terms) float64 { return t.Hit }), true},
				{"SQuAD EM", "share of rollouts", term(func(t grpo.Terms) float64 { return t.SquadEM }), true},
				{"SQuAD F1", "F1 (0–1)", term(func(t grpo.Terms) float64 { return t.SquadF1 }), true},
				{"guard penalty", "mean penalty per rollout", term(func(t grpo.Terms) float64 { return t.GuardPenalty }), false},
			}, 2},
		{"kl", "KL to the reference policy", "Token-mean KL (grpo.loss.kl_estimator) of the policy to its reference, as the trainer reports it: " +
			"in the loss when grpo.loss.kl_coef > 0; measured only (a diagnostic, not in the loss) when it is 0 and the trainer measures it anyway (capabilities.kl_measured); " +
			notComputed + ". " + smoothing,
			[]panel{
				{"KL (in the loss)", "KL (nats per token)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.KL) }, false},
				{"KL (measured, not in the loss)", "KL (nats per token)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.KLMeasured) }, false},
			}, 2},
		{"stability", "Policy stability", "What a collapse shows first (docs/GRPO_STABILITY.md): the policy's token entropy, the share of tokens the PPO clip cut " +
			"(both sides), and for the embedded policy its weights' L2 norm (bias left out) and bias; " + notComputed + ". " + smoothing,
			[]panel{
				{"entropy", "entropy (nats per token)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.Entropy) }, false},
				{"clip fraction", "share of tokens", func(m grpo.StepMetrics) float64 { return grpo.Val(m.ClipFracLow) + grpo.Val(m.ClipFracHigh) }, true},
				{"weight norm", "L2 norm (bias left out)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.WeightNorm) }, false},
				{"bias", "bias", func(m grpo.StepMetrics) float64 { return grpo.Val(m.Bias) }, false},
			}, 2},
		{"zero_variance", "Zero-variance groups", "Share of the groups with ≥ 2 valid rollouts whose rewards (or one term) are all equal: they carry no GRPO signal. " + smoothing,
			[]panel{
				{"total reward", "share of groups", func(m grpo.StepMetrics) float64 { return grpo.Val(m.ZeroVarFrac) }, true},
				{"Rouge-L", "share of groups", func(m grpo.StepMetrics) float64 { return grpo.Val(m.ZeroVarFracRougeL) }, true},
				{"EM (reward)", "share of groups", func(m grpo.StepMetrics) float64 { return grpo.Val(m.ZeroVarFracEM) }, true},
				{"hit", "share of groups", func(m grpo.StepMetrics) float64 { return grpo.Val(m.ZeroVarFracHit) }, true},
			}, 2},
		{"optimization", "Optimization", "Policy loss, gradient norm (before clipping), token entropy and rewrite length per step; " + notComputed + ". " + smoothing,
			[]panel{
				{"loss", "loss (token mean)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.Loss) }, false},
				{"grad norm", "global L2 norm", func(m grpo.StepMetrics) float64 { return grpo.Val(m.GradNorm) }, false},
				{"entropy", "entropy (nats per token)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.Entropy) }, false},
				{"rewrite length", "words per rewrite", func(m grpo.StepMetrics) float64 { return m.RewriteLenMean }, false},
			}, 2},
		{"timing", "Time per step", "Where each step's wall time went: sample, retrieve, respond, score, other and update are wall-clock shares taken one after the other, which add up to the whole step (the per-rollout sums are t_retrieve_sum_s, t_respond_sum_s and t_score_sum_s in metrics.jsonl). " + smoothing,
			[]panel{
				{"sample", "seconds", func(m grpo.StepMetrics) float64 { return m.SampleSeconds }, false},
				{"retrieve (wall)", "seconds", func(m grpo.StepMetrics) float64 { return m.RetrieveSeconds }, false},
				{"respond (wall)", "seconds", func(m grpo.StepMetrics) float64 { return m.RespondSeconds }, false},
				{"score (wall)", "seconds", func(m grpo.StepMetrics) float64 { return m.ScoreSeconds }, false},
				{"other (wall)", "seconds", func(m grpo.StepMetrics) float64 { return m.OtherSeconds }, false},
				{"update", "seconds", func(m grpo.StepMetrics) float64 { return m.UpdateSeconds }, false},
				{"whole step (wall)", "seconds", func(m grpo.StepMetrics) float64 { return m.StepSeconds }, false},
			}, 2},
	}
	var omitted []string // figures with no data in any run, said in the optimization caption
	for _, s := range steps {
		f, err := buildStepFigure(runs, s.panels)
		if err != nil {
			return nil, fmt.Errorf("figure %s: %w", s.name, err)
		}
		if f.plots == nil {
			continue // no step lines at all
		}
		if f.empty {
			omitted = append(omitted, s.title+" is not drawn: no run computed it"+map[string]string{"kl": " (grpo.loss.kl_coef is 0 and the trainer does not measure it)"}[s.name]+".")
			continue
		}
		// The caption says what the figure shows: the moving-average
		// sentence only when one is drawn.
		caption := strings.TrimSuffix(s.caption, smoothing)
		if f.smoothed {
			caption += smoothing
		} else {
			caption += perStep
		}
		for _, n := range f.notes {
			caption += " " + n
		}
		png, err := render(f.plots, s.cols)
		if err := add(s.name, s.title, caption, png, err); err != nil {
			return nil, err
		}
	}
	for i := range figs {
		if figs[i].Name == "optimization" && len(omitted) > 0 {
			figs[i].Caption += " " + strings.Join(omitted, " ")
		}
	}
	sftPNG, err := sftFigure(runs)
	if err := add("sft", "SFT phase", "Supervised loss per epoch of the SFT phase that precedes GRPO.", sftPNG, err); err != nil {
		return nil, err
	}
	png, evalNotes, err := evalFigure(runs, []evalPanel{
		{"eval reward", "mean reward per turn", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return e.Reward, e.CI.Reward }, false},
		{"eval Recall@10", "Recall@10 (0–1)", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return grpo.Val(e.Recall10), e.CI.Recall10 }, true},
		{"eval MRR", "MRR (0–1)", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return grpo.Val(e.MRR), e.CI.MRR }, true},
		{"eval NDCG@3", "NDCG@3 (0–1)", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return grpo.Val(e.NDCG3), e.CI.NDCG3 }, true},
		{"eval SQuAD F1", "F1 (0–1)", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return e.SquadF1, e.CI.SquadF1 }, true},
		{"adds nothing (policy)", "share of greedy rewrites = raw question", func(e grpo.EvalSystem) (float64, *grpo.Interval) { return grpo.Val(e.AddsNothing), nil }, true},
	})
	if err := add("eval", "Held-out evaluation", "Greedy policy rewrites (solid, dots) against the raw question (dashed) at each evaluation, "+
		"with 95% intervals shaded (cluster bootstrap over conversations, 2000 resamples)."+strings.Join(evalNotes, ""), png, err); err != nil {
		return nil, err
	}
	return figs, nil
}

// smoothHalf is the half-width of the moving average for a series of n
// steps: about 1/50 of the series each side, none below 50 steps.
func smoothHalf(n int) int { return n / 50 }

// stepFigureParts is a step figure before rendering, with what its caption
// must say about it.
type stepFigureParts struct {
	plots    []*plot.Plot // nil when no run has step lines
	empty    bool         // no panel has a value in any run
	smoothed bool         // some run's moving average is drawn
	notes    []string     // caption sentences: identical curves, float noise
	legend   []string     // the first panel's legend labels
}

func buildStepFigure(runs []Run, panels []panel) (stepFigureParts, error) {
	var f stepFigureParts
	hasData, maxStep := false, 0
	for _, r := range runs {
		hasData = hasData || len(r.Steps) > 0
		for _, m := range r.Steps {
			maxStep = max(maxStep, m.Step)
		}
	}
	if !hasData {
		return f, nil
	}
	f.empty = true
	same := newSameCurves()
	f.plots = make([]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := newPlot(pn.title, "GRPO step", pn.ylabel)
		entries, points := 0, 0
		maxAbs := 0.0
		series := make([]plotter.XYs, len(runs))
		for ri, r := range runs {
			xy := make(plotter.XYs, 0, len(r.Steps))
			for _, m := range r.Steps {
				if v := pn.get(m); !math.IsNaN(v) && !math.IsInf(v, 0) {
					xy = append(xy, plotter.XY{X: float64(m.Step), Y: v})
					maxAbs = math.Max(maxAbs, math.Abs(v))
				}
			}
			series[ri] = xy
			if len(xy) == 0 {
				continue
			}
			points += len(xy)
			c := runColor(ri)
			// A curve equal to an earlier run's would hide under it (or hide
			// it): drawn dashed over it, and said in the legend and caption.
			twin := same.check(pi, ri, xy, series[:ri])
			label := r.Name
			if twin >= 0 {
				label += " (= " + runs[twin].Name + ")"
			}
			raw, err := plotter.NewLine(xy)
			if err != nil {
				return f, err
			}
			half := smoothHalf(len(r.Steps))
			if half < 1 {
				raw.Color, raw.Width = c, vg.Points(2)
				if twin >= 0 {
					raw.Dashes = twinDashes
				}
				p.Add(raw)
				if pi == 0 {
					p.Legend.Add(label+": per step", raw)
					f.legend = append(f.legend, label+": per step")
					entries++
				}
				continue
			}
			f.smoothed = true
			raw.Color, raw.Width = faded(c), vg.Points(1)
			l, err := plotter.NewLine(movingAverage(xy, half))
			if err != nil {
				return f, err
			}
			l.Color, l.Width = c, vg.Points(2)
			if twin >= 0 {
				raw.Dashes, l.Dashes = twinDashes, twinDashes
			}
			p.Add(raw, l)
			if pi == 0 {
				avg := fmt.Sprintf("%s: moving average, %d steps", label, 2*half+1)
				p.Legend.Add(label+": per step", raw)
				p.Legend.Add(avg, l)
				f.legend = append(f.legend, label+": per step", avg)
				entries += 2
			}
		}
		switch {
		case points == 0:
			markNotComputed(p, float64(maxStep))
		case pn.share:
			p.Y.Min, p.Y.Max = 0, 1
			// The legend's room above 1 carries no ticks: a share reads to 1.
			p.Y.Tick.Marker = boundedTicks{0, 1}
		case maxAbs > 0 && maxAbs <= floatNoise:
			// An on-policy GRPO loss is the mean of group-normalized
			// advantages: 0 but for rounding (±1e-15). Gonum would zoom in
			// on the noise and label it as if it were signal.
			p.Title.Text += " (0 up to rounding)"
			p.Y.Min, p.Y.Max = -1, 1
			p.Y.Tick.Marker = onlyTicks{0}
			f.notes = append(f.notes, fmt.Sprintf("Panel %q: 0 up to float rounding at every step (largest |value| %.2g), drawn as 0.", pn.title, maxAbs))
		}
		f.empty = f.empty && points == 0
		if pi == 0 {
			legendRoom(p, entries)
		}
		f.plots[pi] = p
	}
	titles := make([]string, len(panels))
	for i, pn := range panels {
		titles[i] = pn.title
	}
	f.notes = append(f.notes, same.notes(runs, titles)...)
	return f, nil
}

// floatNoise is the largest |value| a step metric can have and still be
// float rounding of 0 (a token-mean loss that is not 0 is orders above it).
const floatNoise = 1e-9

// twinDashes draws a curve equal to an earlier run's, so both show.
var twinDashes = []vg.Length{vg.Points(4), vg.Points(4)}

// sameCurves finds runs whose curve in a panel equals an earlier run's.
type sameCurves struct {
	twins map[[2]int][]int // (run, earlier run) → panels where they are equal
	order [][2]int
}

func newSameCurves() *sameCurves { return &sameCurves{twins: map[[2]int][]int{}} }

// check returns the first earlier run whose curve in panel pi equals xy, or -1.
func (s *sameCurves) check(pi, ri int, xy plotter.XYs, earlier []plotter.XYs) int {
	for rj, other := range earlier {
		if len(other) > 0 && reflect.DeepEqual(other, xy) {
			k := [2]int{ri, rj}
			if _, ok := s.twins[k]; !ok {
				s.order = append(s.order, k)
			}
			s.twins[k] = append(s.twins[k], pi)
			return rj
		}
	}
	return -1
}

// notes says, per pair of runs, in which panels their curves coincide.
func (s *sameCurves) notes(runs []Run, panelTitles []string) []string {
	var out []string
	for _, k := range s.order {
		var titles []string
		for _, pi := range s.twins[k] {
			titles = append(titles, panelTitles[pi])
		}
		where := "in " + strings.Join(titles, ", ")
		if len(titles) == len(panelTitles) && len(panelTitles) > 1 {
			where = "in every panel"
		}
		out = append(out, fmt.Sprintf("%s's curve equals %s's %s (drawn dashed over it).", runs[k[0]].Name, runs[k[1]].Name, where))
	}
	return out
}

// markNotComputed labels an empty panel, so a metric no run computed reads
// as absent rather than as a flat line at 0.
func markNotComputed(p *plot.Plot, maxX float64) {
	p.Title.Text += " (not computed)"
	p.X.Max = math.Max(maxX, 1)
	p.Y.Min, p.Y.Max = 0, 1
	p.HideY()
	lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: plotter.XYs{{X: p.X.Max / 2, Y: 0.5}}, Labels: []string{"not computed in any run"}})
	if err == nil {
		lbl.TextStyle[0].Font.Size = vg.Points(12)
		lbl.TextStyle[0].XAlign, lbl.TextStyle[0].YAlign = draw.XCenter, draw.YCenter
		p.Add(lbl)
	}
}

// band is the shaded area between an interval's bounds along the steps.
func band(steps []float64, ivs []*grpo.Interval, c color.NRGBA) (*plotter.Polygon, error) {
	var upper, lower plotter.XYs
	for i, iv := range ivs {
		if iv == nil {
			continue
		}
		upper = append(upper, plotter.XY{X: steps[i], Y: iv.Hi})
		lower = append(lower, plotter.XY{X: steps[i], Y: iv.Lo})
	}
	if len(upper) == 0 {
		return nil, nil
	}
	ring := append(plotter.XYs{}, upper...)
	for i := len(lower) - 1; i >= 0; i-- {
		ring = append(ring, lower[i])
	}
	poly, err := plotter.NewPolygon(ring)
	if err != nil {
		return nil, err
	}
	c.A = 45
	poly.Color = c
	poly.LineStyle.Width = 0
	return poly, nil
}

// evalFigure renders the eval panels, and the caption sentences for runs
// whose policy curves coincide.
func evalFigure(runs []Run, panels []evalPanel) ([]byte, []string, error) {
	hasData := false
	for _, r := range runs {
		hasData = hasData || len(r.Evals) > 0
	}
	if !hasData {
		return nil, nil, nil
	}
	same := newSameCurves()
	// When the runs agree on the raw baseline wherever they share a step
	// (the usual case: same eval set), draw it once in grey.
	shared, sharedRawEvals := sharedRaw(runs)
	grey := color.NRGBA{60, 60, 60, 255}
	dashed := []vg.Length{vg.Points(5), vg.Points(3)}
	plots := make([]*plot.Plot, len(panels))
	for pi, pn := range panels {
		p := newPlot(pn.title, "GRPO step", pn.ylabel)
		entries, points := 0, 0
		// series draws one system's line, dots and interval band.
		var drawn []plotter.XYs // each run's policy curve in this panel
		series := func(steps []float64, sys []grpo.EvalSystem, c color.NRGBA, dash bool) (*plotter.Line, *plotter.Scatter, *plotter.Polygon, error) {
			xy := plotter.XYs{}
			var xs []float64
			var ivs []*grpo.Interval
			for i, e := range sys {
				v, iv := pn.get(e)
				if math.IsNaN(v) {
					continue
				}
				xy = append(xy, plotter.XY{X: steps[i], Y: v})
				xs, ivs = append(xs, steps[i]), append(ivs, iv)
			}
			if !dash {
				drawn = append(drawn, xy)
			}
			if len(xy) == 0 {
				return nil, nil, nil, nil
			}
			points += len(xy)
			l, pts, err := plotter.NewLinePoints(xy)
			if err != nil {
				return nil, nil, nil, err
			}
			l.Color, pts.Color = c, c
			if dash {
				l.Width, l.Dashes = vg.Points(1.5), dashed
				pts.Shape, pts.Radius = draw.BoxGlyph{}, vg.Points(2)
			} else {
				l.Width = vg.Points(2)
				pts.Shape, pts.Radius = draw.CircleGlyph{}, vg.Points(2.5)
			}
			poly, err := band(xs, ivs, c)
			return l, pts, poly, err
		}
		var rawParts []plot.Plotter
		addRaw := func(name string, steps []float64, sys []grpo.EvalSystem, c color.NRGBA) error {
			l, pts, poly, err := series(steps, sys, c, true)
			if err != nil || l == nil {
				return err
			}
			if poly != nil {
				p.Add(poly) // bands first, under every line
			}
			rawParts = append(rawParts, l, pts)
			if pi == 0 {
				p.Legend.Add(name, l, pts)
				entries++
			}
			return nil
		}
		if shared {
			steps := make([]float64, len(sharedRawEvals))
			sys := make([]grpo.EvalSystem, len(sharedRawEvals))
			for i, e := range sharedRawEvals {
				steps[i], sys[i] = float64(e.Step), e.Raw
			}
			if err := addRaw("raw question (95% CI shaded)", steps, sys, grey); err != nil {
				return nil, nil, err
			}
		}
		for ri, r := range runs {
			steps := make([]float64, len(r.Evals))
			pol := make([]grpo.EvalSystem, len(r.Evals))
			raw := make([]grpo.EvalSystem, len(r.Evals))
			for i, e := range r.Evals {
				steps[i], pol[i], raw[i] = float64(e.Step), e.Policy, e.Raw
			}
			c := runColor(ri)
			if !shared {
				if err := addRaw(r.Name+": raw question", steps, raw, c); err != nil {
					return nil, nil, err
				}
			}
			l, pts, poly, err := series(steps, pol, c, false)
			if err != nil {
				return nil, nil, err
			}
			if l == nil {
				continue
			}
			label := r.Name
			if twin := same.check(pi, ri, drawn[ri], drawn[:ri]); twin >= 0 {
				l.Dashes = twinDashes
				label += " (= " + runs[twin].Name + ")"
			}
			if poly != nil {
				p.Add(poly)
			}
			p.Add(l, pts)
			if pi == 0 {
				p.Legend.Add(label+": policy (95% CI shaded)", l, pts)
				entries++
			}
		}
		// Baselines are drawn last, dashed over the policy lines, so they
		// stay visible where the policy still equals them.
		p.Add(rawParts...)
		if points == 0 {
			markNotComputed(p, 1)
		} else if pn.share {
			p.Y.Min, p.Y.Max = 0, 1
			p.Y.Tick.Marker = boundedTicks{0, 1}
		}
		if pi == 0 {
			legendRoom(p, entries)
		}
		plots[pi] = p
	}
	titles := make([]string, len(panels))
	for i, pn := range panels {
		titles[i] = pn.title
	}
	var notes []string
	for _, n := range same.notes(runs, titles) {
		notes = append(notes, " Policy: "+n)
	}
	png, err := render(plots, 2)
	return png, notes, err
}

// sftFigure plots the SFT loss per epoch; nil when no run had an SFT phase.
func sftFigure(runs []Run) ([]byte, error) {
	p := newPlot("SFT loss", "epoch", "loss (mean NLL or BCE, nats)")
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
// every step they share, and if so returns it once per step, in step order.
func sharedRaw(runs []Run) (bool, []grpo.EvalMetrics) {
	byStep := map[int]grpo.EvalMetrics{}
	for _, r := range runs {
		for _, e := range r.Evals {
			if prev, ok := byStep[e.Step]; ok && !reflect.DeepEqual(prev.Raw, e.Raw) {
				return false, nil
			}
			byStep[e.Step] = e
		}
	}
	out := make([]grpo.EvalMetrics, 0, len(byStep))
	for _, e := range byStep {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
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

func newPlot(title, xlabel, ylabel string) *plot.Plot {
	p := plot.New()
	p.Title.Text = title
	p.Title.TextStyle.Font.Size = vg.Points(13)
	p.X.Label.Text = xlabel
	p.Y.Label.Text = ylabel
	p.X.Min = 0
	p.X.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Label.TextStyle.Font.Size = vg.Points(11)
	p.Y.Tick.Marker = shortTicks{}
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

// movingAverage is the centred moving average of half points each side
// (fewer at the ends).
func movingAverage(xy plotter.XYs, half int) plotter.XYs {
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

// shortTicks are gonum's default ticks with labels of at most 3 significant
// digits ("1.2e-15", not "1.23456e-15").
type shortTicks struct{}

func (shortTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'g', 3, 64)
		}
	}
	return ts
}

// boundedTicks are shortTicks within [lo, hi]: a bounded metric's axis
// extended to make room for the legend shows no tick past its bound.
type boundedTicks struct{ lo, hi float64 }

func (b boundedTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, t := range (shortTicks{}).Ticks(min, max) {
		if t.Value >= b.lo-1e-12 && t.Value <= b.hi+1e-12 {
			out = append(out, t)
		}
	}
	return out
}

// onlyTicks labels the given values and nothing else.
type onlyTicks []float64

func (o onlyTicks) Ticks(min, max float64) []plot.Tick {
	var out []plot.Tick
	for _, v := range o {
		if v >= min && v <= max {
			out = append(out, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'g', 3, 64)})
		}
	}
	return out
}
