package report

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gonum.org/v1/plot"

	"github.com/himes-rl/himes/grpo"
)

// synthRun is a run of n steps: reward and Rouge-L rise with the step, the
// loss is the given function of the step, KL only when withKL.
func synthRun(name string, n int, loss func(int) float64, withKL bool) Run {
	r := Run{Name: name}
	for s := 1; s <= n; s++ {
		v := 0.2 + 0.5*float64(s)/float64(n)
		m := grpo.StepMetrics{Kind: "step", Step: s, RewardMean: fp(v), Loss: fp(loss(s)), GradNorm: fp(1),
			Terms: &grpo.Terms{Reward: v, RougeLF1: v, EM: 0.1, Hit: 1, SquadF1: v / 2}}
		if withKL {
			m.KL = fp(0.001 * float64(s))
		}
		r.Steps = append(r.Steps, m)
	}
	return r
}

func figureByName(t *testing.T, figs []Figure, name string) *Figure {
	t.Helper()
	for i := range figs {
		if figs[i].Name == name {
			return &figs[i]
		}
	}
	return nil
}

func ticksOf(p *plot.Plot) []plot.Tick { return p.Y.Tick.Marker.Ticks(p.Y.Min, p.Y.Max) }

var optimizationPanels = func() []panel {
	return []panel{{"loss", "loss (token mean)", func(m grpo.StepMetrics) float64 { return grpo.Val(m.Loss) }, false},
		{"grad norm", "global L2 norm", func(m grpo.StepMetrics) float64 { return grpo.Val(m.GradNorm) }, false}}
}

// An on-policy loss is 0 up to rounding (±1e-15): its axis is not zoomed in
// on the noise (gonum labelled it 2.09e-15 / -1.1e-15 / -4.29e-15) but reads 0.
func TestLossAtFloatNoiseReadsZero(t *testing.T) {
	noise := func(s int) float64 { return []float64{2.09e-15, -1.1e-15, -4.29e-15}[s%3] }
	f, err := buildStepFigure([]Run{synthRun("a", 30, noise, false)}, optimizationPanels())
	if err != nil {
		t.Fatal(err)
	}
	p := f.plots[0]
	ticks := ticksOf(p)
	if len(ticks) != 1 || ticks[0].Value != 0 || ticks[0].Label != "0" {
		t.Errorf("loss ticks %+v, want the single label 0", ticks)
	}
	if p.Y.Min != -1 || p.Y.Max < 1 || !strings.Contains(p.Title.Text, "0 up to rounding") {
		t.Errorf("loss axis [%g, %g] title %q", p.Y.Min, p.Y.Max, p.Title.Text)
	}
	if len(f.notes) != 1 || f.notes[0] != `Panel "loss": 0 up to float rounding at every step (largest |value| 4.3e-15), drawn as 0.` {
		t.Errorf("notes %q", f.notes)
	}
	// A real loss keeps gonum's axis and its own labels.
	f, err = buildStepFigure([]Run{synthRun("a", 30, func(s int) float64 { return -0.01 * float64(s) }, false)}, optimizationPanels())
	if err != nil {
		t.Fatal(err)
	}
	if len(f.notes) != 0 || len(ticksOf(f.plots[0])) < 3 || strings.Contains(f.plots[0].Title.Text, "rounding") {
		t.Errorf("a real loss was treated as noise: %q, %+v", f.notes, ticksOf(f.plots[0]))
	}
}

// A bounded metric (Rouge-L, shares) keeps its axis labels within [0, 1],
// though the first panel's axis is raised to make room for the legend.
func TestBoundedMetricTicksStopAtOne(t *testing.T) {
	panels := []panel{{"Rouge-L F1", "F1 (0–1)", term(func(t grpo.Terms) float64 { return t.RougeLF1 }), true}}
	f, err := buildStepFigure([]Run{synthRun("a", 30, func(int) float64 { return 0.1 }, false), synthRun("b", 30, func(int) float64 { return 0.2 }, false)}, panels)
	if err != nil {
		t.Fatal(err)
	}
	p := f.plots[0]
	if p.Y.Max <= 1 {
		t.Fatalf("no legend room: y max %g", p.Y.Max)
	}
	ticks, top := ticksOf(p), 0.0
	for _, tk := range ticks {
		if tk.Value < 0 || tk.Value > 1 {
			t.Errorf("tick %g (%q) outside [0, 1]", tk.Value, tk.Label)
		}
		if tk.Label != "" {
			top = max(top, tk.Value)
		}
	}
	if top != 1 {
		t.Errorf("top labelled tick %g, want 1: %+v", top, ticks)
	}
}

// The moving-average sentence is in a caption only when one is drawn (from
// 50 steps on); an empty KL figure is left out and the omission said; two
// runs with equal curves are told apart.
func TestCaptionsSayWhatIsDrawn(t *testing.T) {
	flat := func(int) float64 { return -0.01 }
	figs, err := Figures([]Run{synthRun("short", 20, flat, false)})
	if err != nil {
		t.Fatal(err)
	}
	r := figureByName(t, figs, "reward")
	if r == nil || strings.Contains(r.Caption, "moving average over") || !strings.Contains(r.Caption, "One point per step") {
		t.Errorf("20-step reward caption: %v", r)
	}
	if figureByName(t, figs, "kl") != nil {
		t.Error("a KL figure is drawn though no run computed KL")
	}
	if o := figureByName(t, figs, "optimization"); o == nil || !strings.Contains(o.Caption, "KL to the reference policy is not drawn: no run computed it (grpo.loss.kl_coef is 0 and the trainer does not measure it).") {
		t.Errorf("optimization caption does not say KL is left out: %v", o)
	}

	figs, err = Figures([]Run{synthRun("long", 100, flat, true)})
	if err != nil {
		t.Fatal(err)
	}
	if r := figureByName(t, figs, "reward"); r == nil || !strings.Contains(r.Caption, "bold: its centred moving average") {
		t.Errorf("100-step reward caption: %v", r)
	}
	if figureByName(t, figs, "kl") == nil {
		t.Error("computed KL not drawn")
	}

	// Same seed, same config: b's curves lie exactly on a's.
	a, b := synthRun("a", 20, flat, false), synthRun("b", 20, flat, false)
	a.Evals = []grpo.EvalMetrics{{Kind: "eval", Step: 20, Policy: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.5}}, Raw: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.3}}}}
	b.Evals = a.Evals
	figs, err = Figures([]Run{a, b})
	if err != nil {
		t.Fatal(err)
	}
	if r := figureByName(t, figs, "reward"); r == nil || !strings.Contains(r.Caption, "b's curve equals a's in reward (drawn dashed over it).") {
		t.Errorf("reward caption: %v", r)
	}
	if r := figureByName(t, figs, "terms"); r == nil || !strings.Contains(r.Caption, "b's curve equals a's in every panel") {
		t.Errorf("terms caption: %v", r)
	}
	if e := figureByName(t, figs, "eval"); e == nil || !strings.Contains(e.Caption, "Policy: b's curve equals a's in eval reward") {
		t.Errorf("eval caption: %v", e)
	}
	f, err := buildStepFigure([]Run{a, b}, optimizationPanels())
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(f.legend, "|") != "a: per step|b (= a): per step" {
		t.Errorf("legend %q", f.legend)
	}
}

// report.md carries where each run stands and how the table is computed,
// as report.html does.
func TestMarkdownHasProgressAndTableNote(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "alpha")
	writeRun(t, dir, 20, 0.01, "")
	res, err := Generate(context.Background(), []string{dir}, filepath.Join(root, "out"))
	if err != nil {
		t.Fatal(err)
	}
	md, err := os.ReadFile(res.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	html, err := os.ReadFile(res.HTML)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"- **alpha**: step 20 (no status.json)", "Start/end rewards are means over the first/last tenth of the steps"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("report.md lacks %q:\n%s", want, md)
		}
	}
	if !strings.Contains(string(html), tableNote) {
		t.Error("report.html lacks the table note")
	}
}
