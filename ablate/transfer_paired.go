package ablate

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
)

// pairedMetrics are the metrics a learned recipe is compared on against
// SFT alone, turn by turn.
var pairedMetrics = []string{evaluate.MRecall10, evaluate.MNDCG3}

// TransferPaired is a recipe trained beyond SFT (sft+grpo) against SFT
// alone on the same fold and seed, paired by turn: does GRPO add to SFT? A
// difference between two trained policies' means cannot say it, since both
// share the turns' variance; the paired cluster bootstrap over the
// left-out collection's conversations can.
type TransferPaired struct {
	Variant  string                      `json:"variant"`
	Baseline string                      `json:"baseline"`
	Seed     int                         `json:"seed,omitempty"`
	Metrics  map[string]stats.Comparison `json:"metrics"`
}

// recipeOf is a variant's recipe name without its seed.
func recipeOf(v TransferVariant) string {
	if v.Base != "" {
		return v.Base
	}
	return v.Name
}

// pairedVsSFT compares every run of a fold trained beyond SFT with the SFT
// run of the same seed, on the policy rows of their evaluations'
// turns.parquet. Folds without an "sft" recipe give nothing; a run that
// failed gives nothing and its error is the fold's already.
//
// cfg is the bootstrap configuration the runs' evaluations used (their
// summary.json's stats), so the paired intervals match theirs.
func pairedVsSFT(ctx context.Context, f TransferFold, failed func(k int) bool, cfg stats.Config) ([]TransferPaired, []string) {
	sft := map[int]int{} // seed -> run index
	for k, r := range f.Runs {
		if recipeOf(r.Variant) == "sft" && !failed(k) {
			sft[r.Variant.Seed] = k
		}
	}
	if len(sft) == 0 {
		return nil, nil
	}
	var out []TransferPaired
	var errs []string
	for k, r := range f.Runs {
		if recipeOf(r.Variant) == "sft" || failed(k) {
			continue
		}
		j, ok := sft[r.Variant.Seed]
		if !ok {
			continue
		}
		p, err := pairRuns(ctx, r, f.Runs[j], cfg)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s vs %s: %v", r.Variant.Name, f.Runs[j].Variant.Name, err))
			continue
		}
		out = append(out, p)
	}
	return out, errs
}

// pairRuns is one paired comparison of two runs' policy evaluations.
func pairRuns(ctx context.Context, run, base TransferRun, cfg stats.Config) (TransferPaired, error) {
	p := TransferPaired{Variant: run.Variant.Name, Baseline: base.Variant.Name, Seed: run.Variant.Seed, Metrics: map[string]stats.Comparison{}}
	a, err := evaluate.ReadTurnMetrics(ctx, filepath.Join(run.EvalDir, "turns.parquet"), "policy", false, pairedMetrics)
	if err != nil {
		return p, err
	}
	b, err := evaluate.ReadTurnMetrics(ctx, filepath.Join(base.EvalDir, "turns.parquet"), "policy", false, pairedMetrics)
	if err != nil {
		return p, err
	}
	if !slices.Equal(a.ConvIDs, b.ConvIDs) || !slices.Equal(a.Turns, b.Turns) {
		return p, fmt.Errorf("the two evaluations are not of the same turns in the same order (%d vs %d turns)", len(a.Turns), len(b.Turns))
	}
	turns := make([]datasets.Turn, len(a.ConvIDs))
	for i := range turns {
		turns[i] = datasets.Turn{ConvID: a.ConvIDs[i], Turn: a.Turns[i]}
	}
	convs := evaluate.Conversations(turns)
	for _, m := range pairedMetrics {
		c, err := evaluate.Compare(convs, a.Values[m], b.Values[m], cfg)
		if err != nil {
			return p, fmt.Errorf("%s: %w", m, err)
		}
		p.Metrics[m] = c
	}
	return p, nil
}

// writePairedVsSFT adds the table of recipes against SFT alone, paired by
// turn, when the transfer ran both.
func writePairedVsSFT(b *strings.Builder, rows []TransferRow) {
	n := 0
	for _, r := range rows {
		n += len(r.VsSFT)
	}
	if n == 0 {
		return
	}
	b.WriteString("\n### against SFT alone, paired by turn (same fold and seed): Δ [95% paired cluster-bootstrap interval], p\n\n| left out | recipe |")
	for _, m := range pairedMetrics {
		fmt.Fprintf(b, " Δ %s |", m)
	}
	b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(pairedMetrics)) + "\n")
	for _, r := range rows {
		for _, p := range r.VsSFT {
			fmt.Fprintf(b, "| %s | %s − %s |", evaluate.MarkdownEscape(r.HeldOut), evaluate.MarkdownEscape(p.Variant), evaluate.MarkdownEscape(p.Baseline))
			for _, m := range pairedMetrics {
				c := p.Metrics[m]
				mark := ""
				if c.Lo > 0 || c.Hi < 0 {
					mark = " *" // the interval excludes 0
				}
				fmt.Fprintf(b, " %+.3f [%+.3f, %+.3f], p %.3f%s |", c.Diff, c.Lo, c.Hi, c.P, mark)
			}
			b.WriteString("\n")
		}
	}
	b.WriteString("\n\\* the interval excludes 0.\n")
}
