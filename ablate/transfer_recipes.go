package ablate

import (
	"context"
	"fmt"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/report"
)

// Recipes as an axis of the transfer (--recipes): each fold and seed trains
// every named recipe from the same data and seed, and each is set against
// SFT alone, paired by turn.

// The recipes --recipes names.
const (
	// RecipeSFT is SFT alone on the human rewrites (grpo.steps 0).
	RecipeSFT = "sft"
	// RecipeGRPO is GRPO from the raw question, no SFT (grpo.sft.epochs 0).
	RecipeGRPO = "grpo"
	// RecipeSFTGRPO is SFT, then GRPO: the config as it is.
	RecipeSFTGRPO = "sft+grpo"
)

// Recipes are the recipe names in table order.
var Recipes = []string{RecipeSFT, RecipeGRPO, RecipeSFTGRPO}

// TransferRecipes are the variants --recipes names, in the order given;
// none gives TransferVariants(cfg), the recipes the config supports. A
// recipe the config cannot train (sft without grpo.sft.epochs, grpo
// without grpo.steps) is an error naming the key to set.
func TransferRecipes(cfg configs.Config, names []string) ([]TransferVariant, error) {
	if len(names) == 0 {
		return TransferVariants(cfg), nil
	}
	seen := map[string]bool{}
	var vs []TransferVariant
	for _, n := range names {
		n = strings.TrimSpace(n)
		if seen[n] {
			return nil, fmt.Errorf("transfer: --recipes: %q is given twice", n)
		}
		seen[n] = true
		needSFT := func() error {
			if cfg.GRPO.SFT.Epochs == 0 {
				return fmt.Errorf("transfer: --recipes %s needs an SFT phase, and the config has grpo.sft.epochs 0 (set it, e.g. --set grpo.sft.epochs=3)", n)
			}
			return nil
		}
		needGRPO := func() error {
			if cfg.GRPO.Steps == 0 {
				return fmt.Errorf("transfer: --recipes %s needs GRPO steps, and the config has grpo.steps 0 (set it, e.g. --set grpo.steps=150)", n)
			}
			return nil
		}
		switch n {
		case RecipeSFT:
			if err := needSFT(); err != nil {
				return nil, err
			}
			vs = append(vs, TransferVariant{Name: n, Overrides: []string{"grpo.steps=0"}})
		case RecipeGRPO:
			if err := needGRPO(); err != nil {
				return nil, err
			}
			vs = append(vs, TransferVariant{Name: n, Overrides: []string{"grpo.sft.epochs=0"}})
		case RecipeSFTGRPO:
			if err := needSFT(); err != nil {
				return nil, err
			}
			if err := needGRPO(); err != nil {
				return nil, err
			}
			vs = append(vs, TransferVariant{Name: n})
		default:
			return nil, fmt.Errorf("transfer: --recipes: unknown recipe %q (have %s)", n, strings.Join(Recipes, ", "))
		}
	}
	return vs, nil
}

// RecipeDelta is one metric of a recipe against SFT alone: both means over
// the paired turns (each turn's value the mean over the seeds), and the
// paired comparison recipe − SFT.
type RecipeDelta struct {
	SFT    float64          `json:"sft_mean"`
	Recipe float64          `json:"recipe_mean"`
	VsSFT  stats.Comparison `json:"vs_sft"`
}

// TransferRecipePaired is one recipe of a fold against SFT alone, paired by
// turn and averaged over the seeds both finished: each turn's value is the
// mean over those seeds of the recipe's runs, set against the mean of SFT's
// runs of the same seeds; the interval is the paired cluster bootstrap over
// the left-out collection's conversations. It answers "does this recipe
// beat SFT on these turns, on average over training seeds"; how much the
// seeds themselves spread is the over-seeds table's.
type TransferRecipePaired struct {
	Recipe  string                 `json:"recipe"`
	Seeds   []int                  `json:"seeds,omitempty"` // the seeds paired (none: one unseeded run each)
	Metrics map[string]RecipeDelta `json:"metrics"`
}

// recipesVsSFT pairs every recipe of fold f other than SFT with SFT alone,
// as TransferRecipePaired says. Runs that failed are left
// out, their errors being the fold's already; a recipe with no seed in
// common with SFT gives nothing.
func recipesVsSFT(ctx context.Context, f TransferFold, failed func(k int) bool, cfg stats.Config) ([]TransferRecipePaired, []string) {
	bySeed := map[string]map[int]int{} // recipe -> seed -> run index
	var order []string
	for k, r := range f.Runs {
		if failed(k) {
			continue
		}
		name := recipeOf(r.Variant)
		if bySeed[name] == nil {
			bySeed[name] = map[int]int{}
			order = append(order, name)
		}
		bySeed[name][r.Variant.Seed] = k
	}
	sft := bySeed[RecipeSFT]
	if len(sft) == 0 {
		return nil, nil
	}
	cache := map[int]evaluate.TurnMetrics{}
	read := func(k int) (evaluate.TurnMetrics, error) {
		if tm, ok := cache[k]; ok {
			return tm, nil
		}
		tm, err := evaluate.ReadTurnMetrics(ctx, filepath.Join(f.Runs[k].EvalDir, "turns.parquet"), "policy", false, pairedMetrics)
		if err != nil {
			return tm, fmt.Errorf("%s: %w", f.Runs[k].Variant.Name, err)
		}
		cache[k] = tm
		return tm, nil
	}
	var out []TransferRecipePaired
	var errs []string
	for _, name := range order {
		if name == RecipeSFT {
			continue
		}
		var seeds []int
		for k, r := range f.Runs { // run order: the seeds as given
			if failed(k) || recipeOf(r.Variant) != name {
				continue
			}
			if _, ok := sft[r.Variant.Seed]; ok {
				seeds = append(seeds, r.Variant.Seed)
			}
		}
		if len(seeds) == 0 {
			continue
		}
		p, err := pairRecipe(name, seeds, bySeed[name], sft, read, cfg)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s vs %s: %v", name, RecipeSFT, err))
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

// pairRecipe averages each turn over the seeds for the recipe's runs and
// SFT's, then compares the two per metric.
func pairRecipe(name string, seeds []int, runs, sft map[int]int, read func(int) (evaluate.TurnMetrics, error), cfg stats.Config) (TransferRecipePaired, error) {
	p := TransferRecipePaired{Recipe: name, Metrics: map[string]RecipeDelta{}}
	if !(len(seeds) == 1 && seeds[0] == 0) {
		p.Seeds = seeds
	}
	var ref *evaluate.TurnMetrics
	mean := func(idx map[int]int) (map[string][]float64, error) {
		sums := map[string][]float64{}
		for _, s := range seeds {
			tm, err := read(idx[s])
			if err != nil {
				return nil, err
			}
			if ref == nil {
				ref = &tm
			} else if !slices.Equal(ref.ConvIDs, tm.ConvIDs) || !slices.Equal(ref.Turns, tm.Turns) {
				return nil, fmt.Errorf("the evaluations are not of the same turns in the same order (%d vs %d turns)", len(ref.Turns), len(tm.Turns))
			}
			for _, m := range pairedMetrics {
				if sums[m] == nil {
					sums[m] = make([]float64, len(tm.Turns))
				}
				for i, v := range tm.Values[m] {
					sums[m][i] += v // a turn without judgments is NaN in every run, and stays NaN
				}
			}
		}
		for _, m := range pairedMetrics {
			for i := range sums[m] {
				sums[m][i] /= float64(len(seeds))
			}
		}
		return sums, nil
	}
	a, err := mean(runs)
	if err != nil {
		return p, err
	}
	b, err := mean(sft)
	if err != nil {
		return p, err
	}
	turns := make([]datasets.Turn, len(ref.ConvIDs))
	for i := range turns {
		turns[i] = datasets.Turn{ConvID: ref.ConvIDs[i], Turn: ref.Turns[i]}
	}
	convs := evaluate.Conversations(turns)
	for _, m := range pairedMetrics {
		c, err := evaluate.Compare(convs, a[m], b[m], cfg)
		if err != nil {
			return p, fmt.Errorf("%s: %w", m, err)
		}
		p.Metrics[m] = RecipeDelta{SFT: pairedMean(b[m], a[m]), Recipe: pairedMean(a[m], b[m]), VsSFT: c}
	}
	return p, nil
}

// pairedMean is the mean of xs over the turns where both xs and ys are
// finite: the turns the paired comparison uses.
func pairedMean(xs, ys []float64) float64 {
	sum, n := 0.0, 0
	for i, x := range xs {
		if !math.IsNaN(x) && !math.IsInf(x, 0) && !math.IsNaN(ys[i]) && !math.IsInf(ys[i], 0) {
			sum += x
			n++
		}
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// recipeMetricTitles name the paired metrics in the recipes' table and plot.
var recipeMetricTitles = map[string]string{evaluate.MRecall10: "Recall@10", evaluate.MNDCG3: "NDCG@3"}

// writeRecipesVsSFT writes the recipes table: per fold and recipe, SFT's
// and the recipe's mean over the paired turns and seeds, and their paired
// difference with its interval and p. Nothing when no row has one.
func writeRecipesVsSFT(b *strings.Builder, rows []TransferRow) {
	n := 0
	for _, r := range rows {
		n += len(r.Recipes)
	}
	if n == 0 {
		return
	}
	b.WriteString("\n### recipes against SFT alone, paired by turn, mean over seeds: SFT → recipe, Δ [95% paired cluster-bootstrap interval], p\n\n| left out | recipe | seeds |")
	for _, m := range pairedMetrics {
		fmt.Fprintf(b, " %s |", recipeMetricTitles[m])
	}
	b.WriteString("\n|---|---|---|" + strings.Repeat("---:|", len(pairedMetrics)) + "\n")
	for _, r := range rows {
		for _, p := range r.Recipes {
			seeds := "–"
			if len(p.Seeds) > 0 {
				s := make([]string, len(p.Seeds))
				for i, x := range p.Seeds {
					s[i] = fmt.Sprint(x)
				}
				seeds = strings.Join(s, ",")
			}
			fmt.Fprintf(b, "| %s | %s | %s |", evaluate.MarkdownEscape(r.HeldOut), evaluate.MarkdownEscape(p.Recipe), seeds)
			for _, m := range pairedMetrics {
				d := p.Metrics[m]
				c := d.VsSFT
				mark := ""
				if c.Lo > 0 || c.Hi < 0 {
					mark = " *"
				}
				fmt.Fprintf(b, " %.3f → %.3f: %+.3f [%+.3f, %+.3f], p %.3f%s |", d.SFT, d.Recipe, c.Diff, c.Lo, c.Hi, c.P, mark)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n\\* the interval excludes 0.\n")
}

// RecipesPNG draws each recipe's paired difference against SFT alone, per
// left-out collection and metric (Recall@10, NDCG@3), with its 95% paired
// interval: one bar group per fold and metric, one bar per recipe.
func RecipesPNG(rows []TransferRow) ([]byte, error) {
	var recipes []string
	for _, r := range rows {
		for _, p := range r.Recipes {
			if !slices.Contains(recipes, p.Recipe) {
				recipes = append(recipes, p.Recipe)
			}
		}
	}
	var groups []string
	for _, r := range rows {
		for _, m := range pairedMetrics {
			groups = append(groups, r.HeldOut+" "+recipeMetricTitles[m])
		}
	}
	series := make([]report.BarSeries, len(recipes))
	for k, name := range recipes {
		s := report.BarSeries{Name: name + " − sft"}
		for _, r := range rows {
			for _, m := range pairedMetrics {
				mean, lo, hi := math.NaN(), math.NaN(), math.NaN()
				for _, p := range r.Recipes {
					if p.Recipe == name {
						c := p.Metrics[m].VsSFT
						mean, lo, hi = c.Diff, c.Lo, c.Hi
					}
				}
				s.Mean, s.Lo, s.Hi = append(s.Mean, mean), append(s.Lo, lo), append(s.Hi, hi)
			}
		}
		series[k] = s
	}
	return report.BarChart("Recipes against SFT alone on the left-out collection (paired by turn, mean over seeds)",
		"Δ vs SFT (95% paired CI)", groups, series)
}

// AddRecipes fills each row's recipes against SFT alone (the --recipes
// table), from the runs' per-turn evaluations, with the bootstrap settings
// their evaluations used. errs are RunTransfer's (nil: none failed).
func AddRecipes(ctx context.Context, folds []TransferFold, errs [][]error, rows []TransferRow) {
	for i, f := range folds {
		if rows[i].bootstrap == nil {
			continue
		}
		paired, perrs := recipesVsSFT(ctx, f, func(k int) bool { return errs != nil && errs[i][k] != nil }, *rows[i].bootstrap)
		rows[i].Recipes = paired
		rows[i].Errors = append(rows[i].Errors, perrs...)
	}
}
