package ablate

import (
	"context"
	"errors"
	"math"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/evaluate"
)

func TestTransferRecipesNameTheirOverrides(t *testing.T) {
	cfg := configs.Default()
	cfg.GRPO.SFT.Epochs, cfg.GRPO.Steps = 3, 100
	vs, err := TransferRecipes(cfg, []string{"sft", "grpo", "sft+grpo"})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, v.Name+"|"+strings.Join(v.Overrides, ","))
	}
	if want := []string{"sft|grpo.steps=0", "grpo|grpo.sft.epochs=0", "sft+grpo|"}; !slices.Equal(got, want) {
		t.Errorf("recipes %v, want %v", got, want)
	}
	// No --recipes: today's variants.
	if def, err := TransferRecipes(cfg, nil); err != nil || len(def) != 2 || def[0].Name != "sft" || def[1].Name != "sft+grpo" {
		t.Errorf("default recipes %+v, %v", def, err)
	}
	noSFT := cfg
	noSFT.GRPO.SFT.Epochs = 0
	noGRPO := cfg
	noGRPO.GRPO.Steps = 0
	for _, c := range []struct {
		cfg   configs.Config
		names []string
		want  string
	}{
		{cfg, []string{"sft", "rl"}, `unknown recipe "rl" (have sft, grpo, sft+grpo)`},
		{cfg, []string{"grpo", "grpo"}, `"grpo" is given twice`},
		{noSFT, []string{"sft"}, "grpo.sft.epochs 0"},
		{noSFT, []string{"sft+grpo"}, "grpo.sft.epochs 0"},
		{noGRPO, []string{"grpo"}, "grpo.steps 0"},
	} {
		if _, err := TransferRecipes(c.cfg, c.names); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err %v, want %q", c.names, err, c.want)
		}
	}
}

// TestRecipesVsSFTHandComputed: two seeds of SFT, GRPO and SFT+GRPO (whose
// seed 1 failed) on 4 turns of 2 conversations; turn 3 has no judged passage.
// Per turn, mean over seeds, Recall@10 (NDCG@3 is half of it, turnsWith):
//
//	SFT   seeds 1, 2: (0, .5, –, .1), (.2, .5, –, .3) → (.1, .5, –, .2), mean .8/3
//	GRPO  seeds 1, 2: (1, .5, –, .2), (.6, .7, –, .4) → (.8, .6, –, .3), mean 1.7/3
//	Δ GRPO − SFT = (.7 + .1 + .1)/3 = .3
//
// SFT+GRPO pairs seed 2 alone: (.3, .6, –, .4) against (.2, .5, –, .3), a
// difference of .1 on every turn, so every resample's mean is .1: the
// interval is [.1, .1].
func TestRecipesVsSFTHandComputed(t *testing.T) {
	dir := t.TempDir()
	cfg := configs.Default()
	cfg.GRPO.SFT.Epochs, cfg.GRPO.Steps = 1, 10
	recipes, err := TransferRecipes(cfg, []string{"sft", "grpo", "sft+grpo"})
	if err != nil {
		t.Fatal(err)
	}
	vs, err := SeededVariants(recipes, []int{1, 2})
	if err != nil {
		t.Fatal(err)
	}
	r10 := map[string][]float64{
		"sft seed 1": {0, 0.5, math.NaN(), 0.1}, "sft seed 2": {0.2, 0.5, math.NaN(), 0.3},
		"grpo seed 1": {1, 0.5, math.NaN(), 0.2}, "grpo seed 2": {0.6, 0.7, math.NaN(), 0.4},
		"sft+grpo seed 2": {0.3, 0.6, math.NaN(), 0.4},
	}
	var runs []TransferRun
	errs := [][]error{make([]error, len(vs))}
	for k, v := range vs {
		r := TransferRun{Variant: v, EvalDir: filepath.Join(dir, strings.ReplaceAll(v.Name, " ", "_"), "eval")}
		runs = append(runs, r)
		x, ok := r10[v.Name]
		if !ok {
			errs[0][k] = errors.New("boom")
			continue
		}
		summaryWith(t, r.EvalDir, map[string]float64{"raw": 0.3, "concat": 0.2, "gold": 0.7, "policy": 0.5})
		turnsWith(t, r.EvalDir, x)
	}
	folds := []TransferFold{{Name: "x", Train: []string{"/d/a.jsonl", "/d/b.jsonl"}, Runs: runs}}
	rows := GatherTransfer(folds, errs)
	if len(rows[0].Recipes) != 0 {
		t.Fatal("recipes filled without --recipes")
	}
	var plain strings.Builder
	if err := WriteTransferMarkdown(&plain, rows); err != nil {
		t.Fatal(err)
	}
	AddRecipes(context.Background(), folds, errs, rows)
	got := rows[0].Recipes
	if len(got) != 2 || got[0].Recipe != "grpo" || got[1].Recipe != "sft+grpo" ||
		!slices.Equal(got[0].Seeds, []int{1, 2}) || !slices.Equal(got[1].Seeds, []int{2}) {
		t.Fatalf("recipes %+v", got)
	}
	near := func(a, b float64) bool { return math.Abs(a-b) < 1e-12 }
	for m, scale := range map[string]float64{evaluate.MRecall10: 1, evaluate.MNDCG3: 0.5} {
		d := got[0].Metrics[m]
		if c := d.VsSFT; !near(c.Diff, 0.3*scale) || c.Turns != 3 || c.Clusters != 2 || c.Lo > c.Diff || c.Hi < c.Diff ||
			!near(d.SFT, 0.8/3*scale) || !near(d.Recipe, 1.7/3*scale) {
			t.Errorf("grpo %s: %+v, want SFT %.4f, GRPO %.4f, Δ %.4f over 3 turns of 2 conversations", m, d, 0.8/3*scale, 1.7/3*scale, 0.3*scale)
		}
		d = got[1].Metrics[m]
		if c := d.VsSFT; !near(c.Diff, 0.1*scale) || !near(c.Lo, 0.1*scale) || !near(c.Hi, 0.1*scale) || !near(d.SFT, 1.0/3*scale) {
			t.Errorf("sft+grpo %s: %+v, want Δ %.3f [%.3f, %.3f]", m, d, 0.1*scale, 0.1*scale, 0.1*scale)
		}
	}
	var md strings.Builder
	if err := WriteTransferMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{
		"### recipes against SFT alone, paired by turn, mean over seeds",
		"| left out | recipe | seeds | Recall@10 | NDCG@3 |",
		"| x | grpo | 1,2 | 0.267 → 0.567: +0.300 [",
		"| x | sft+grpo | 2 | 0.333 → 0.433: +0.100 [+0.100, +0.100], p ",
	} {
		if !strings.Contains(md.String(), w) {
			t.Errorf("markdown lacks %q:\n%s", w, md.String())
		}
	}
	if strings.Contains(plain.String(), "recipes against SFT alone") {
		t.Errorf("the table without --recipes:\n%s", plain.String())
	}
	png, err := RecipesPNG(rows)
	if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("png: %d bytes, err %v", len(png), err)
	}
	// A recipe below SFT draws below 0.
	neg := rows[0].Recipes[0].Metrics[evaluate.MRecall10]
	neg.VsSFT.Diff, neg.VsSFT.Lo, neg.VsSFT.Hi = -0.2, -0.3, -0.1
	rows[0].Recipes[0].Metrics[evaluate.MRecall10] = neg
	if png, err := RecipesPNG(rows); err != nil || len(png) < 1000 {
		t.Errorf("negative bars: %d bytes, err %v", len(png), err)
	}
}
