package evaluate

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
)

// The real pipeline (BM25 over the shared knowledge base, the embedded
// extractive responder) on TREC CAsT 2020: the human rewrite must retrieve
// at least as well as the raw question (README: 0.674 vs 0.385 Recall@10
// over four collections), and the paired test must see it.
func TestEvalCAsT2020GoldBeatsRaw(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a BM25 index over the shared knowledge base")
	}
	data := sharedData(t)
	ctx := context.Background()
	turns, _, err := datasets.LoadContext(ctx, filepath.Join(data, "conversations", "cast2020.jsonl"), datasets.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rcfg := retrieval.DefaultConfig()
	rcfg.Candidates = 100 // rank deep enough for Recall@100
	ret, err := retrieval.Open(ctx, rcfg, filepath.Join(data, "kb", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := rollout.NewResponder(ctx, rollout.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	systems := []System{
		{Name: "raw", Rewriter: Raw{}, Retriever: ret},
		{Name: "gold", Rewriter: Gold{}, Retriever: ret},
	}
	rep, _, err := Evaluate(ctx, turns, systems, resp, scorer,
		Options{Concurrency: 2, Stats: StatsConfig{Resamples: 1000, Level: 0.95, Seed: 1}})
	if err != nil {
		t.Fatal(err)
	}
	raw, gold := rep.Systems[0], rep.Systems[1]
	if raw.Failed != 0 || gold.Failed != 0 {
		t.Fatalf("failures: raw %v, gold %v", raw.Failures, gold.Failures)
	}
	if raw.RunDepth != 100 {
		t.Fatalf("ranked %d passages, want 100", raw.RunDepth)
	}
	r, g := raw.Metrics[MRecall10], gold.Metrics[MRecall10]
	t.Logf("CAsT 2020, %d turns / %d conversations: Recall@10 raw %.3f [%.3f, %.3f], gold %.3f [%.3f, %.3f]; Δ %+.3f p=%.4f",
		r.Turns, r.Clusters, r.Mean, r.Lo, r.Hi, g.Mean, g.Lo, g.Hi, gold.VsBaseline[MRecall10].Diff, gold.VsBaseline[MRecall10].P)
	if r.Turns != len(turns) || r.Clusters != 25 {
		t.Fatalf("Recall@10 over %d turns in %d conversations, want %d in 25", r.Turns, r.Clusters, len(turns))
	}
	if !(g.Mean >= r.Mean) {
		t.Fatalf("gold Recall@10 %.3f < raw %.3f", g.Mean, r.Mean)
	}
	if c := gold.VsBaseline[MRecall10]; c.Lo <= 0 || c.P >= 0.05 {
		t.Fatalf("gold − raw Recall@10: %+v, want an interval above 0 and p < 0.05", c)
	}
}
