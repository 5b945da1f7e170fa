package grpo

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
)

// rankingRetriever ranks the passages listed for a rewrite, best first, as
// one chunk each.
type rankingRetriever map[string][]string

func (r rankingRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	ids, ok := r[rewrite]
	if !ok {
		return retrieval.Result{}, errors.New("no ranking for " + rewrite)
	}
	var res retrieval.Result
	for i, id := range ids {
		res.Chunks = append(res.Chunks, retrieval.Ranked{
			Chunk: retrieval.Chunk{ID: id + "#0", PassageID: id, Text: "the answer is " + id},
			Score: float64(len(ids) - i)})
	}
	return res, nil
}

// rewriteOf rewrites each turn to "rw <turn id>".
type rewriteOf struct{}

func (rewriteOf) Name() string { return "policy" }
func (rewriteOf) Rewrite(_ context.Context, t datasets.Turn) (string, error) {
	return "rw " + t.ID(), nil
}

// firstAnswer answers with the first chunk's text.
type firstAnswer struct{}

func (firstAnswer) Name() string { return "first" }
func (firstAnswer) Respond(_ context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	return chunks[0].Text, nil
}

// The in-loop evaluation and himes eval (evaluate.Evaluate) give the same
// numbers for the same rewrites, rankings and rewards: the retrieval
// metrics, the reward, and every interval. The turns are listed out of
// conversation order, one is not judged, and one lists its gold passage
// twice with grades 1 and 0 (relevant: the highest grade counts, the
// reading grpo once had a copy of). By hand, over the 4 judged turns:
//
//	a1 [p1 q]: recall 1, rr 1     a2 [q p2]: recall 1, rr 1/2
//	b1 [q p3] of p3 p4: recall 1/2, rr 1/2    c1 [q r] of p5: 0, 0
//
// Recall@10 (1 + 1 + 1/2 + 0)/4 = 5/8, MRR (1 + 1/2 + 1/2 + 0)/4 = 1/2.
// NDCG@3 (gain 1 at rank r discounted by log2(r+1); every grade here is 1):
// a1 1, a2 1/log2 3, b1 (1/log2 3)/(1 + 1/log2 3), c1 0, over 4.
func TestInLoopEvalMatchesHimesEval(t *testing.T) {
	one, zero := 1, 0
	turn := func(conv string, n int, answer string, gold ...datasets.PassageRef) datasets.Turn {
		return datasets.Turn{ConvID: conv, Turn: n, User: conv, Question: "q " + conv, Answer: answer, Passages: gold}
	}
	turns := []datasets.Turn{
		turn("a", 2, "the answer is p2", datasets.PassageRef{ID: "p2", Relevance: &one}, datasets.PassageRef{ID: "p2", Relevance: &zero}),
		turn("b", 1, "p4", datasets.PassageRef{ID: "p3"}, datasets.PassageRef{ID: "p4"}),
		turn("a", 1, "the answer is p1", datasets.PassageRef{ID: "p1"}),
		turn("c", 1, "nothing like it"),
		turn("b", 2, "the answer is q"), // not judged
	}
	turns[3].Passages = []datasets.PassageRef{{ID: "p5"}}
	rankings := rankingRetriever{
		"rw a#1": {"p1", "q"}, "rw a#2": {"q", "p2"}, "rw b#1": {"q", "p3"}, "rw b#2": {"q"}, "rw c#1": {"q", "r"},
	}
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	const seed = 11
	rep, results, err := evaluate.Evaluate(context.Background(), turns,
		[]evaluate.System{{Name: "policy", Rewriter: rewriteOf{}, Retriever: rankings}},
		firstAnswer{}, scorer, evaluate.Options{Stats: evaluate.DefaultStats(seed)})
	if err != nil {
		t.Fatal(err)
	}
	sys := rep.Systems[0]

	// The loop's evaluation of the same rewrites: its rollouts scored what
	// himes eval's turns scored, its ranker is the pipeline's passage
	// ranking (cmd/himes wires retrieval.PassageRanking).
	rewrites := make([]string, len(turns))
	recs := make([]rollout.Record, len(turns))
	use := make([]bool, len(turns))
	for i, r := range results[0] {
		if r.Error != "" {
			t.Fatalf("himes eval: turn %d failed: %s", i, r.Error)
		}
		rewrites[i], use[i] = r.Rewrite, true
		sc := r.Score
		recs[i] = rollout.Record{Reward: sc.Reward, RougeF1: sc.RougeF1, EM: sc.EM, Hit: sc.Hit, SquadEM: sc.SquadEM, SquadF1: sc.SquadF1}
	}
	l := &Loop{deps: Deps{Seed: seed, Ranker: func(ctx context.Context, user, rewrite, query string) ([]retrieval.Scored, error) {
		res, err := rankings.Retrieve(ctx, user, rewrite, query)
		return retrieval.PassageRanking(res), err
	}}}
	got, err := l.evalSystem(context.Background(), turns, rewrites, recs, use)
	if err != nil {
		t.Fatal(err)
	}

	if got.Recall10 == nil || got.MRR == nil || *got.Recall10 != 5.0/8 || *got.MRR != 0.5 {
		t.Fatalf("in-loop recall_10 %v, mrr %v; want 5/8 and 1/2", got.Recall10, got.MRR)
	}
	d := 1 / math.Log2(3)
	if want := (1 + d + d/(1+d)) / 4; got.NDCG3 == nil || math.Abs(*got.NDCG3-want) > 1e-12 {
		t.Fatalf("in-loop ndcg_cut_3 %v, want %v", got.NDCG3, want)
	}
	for _, c := range []struct {
		name   string
		mean   float64
		iv     *Interval
		metric string
	}{
		{"recall_10", *got.Recall10, got.CI.Recall10, evaluate.MRecall10},
		{"mrr", *got.MRR, got.CI.MRR, evaluate.MMRR},
		{"ndcg_cut_3", *got.NDCG3, got.CI.NDCG3, evaluate.MNDCG3},
		{"reward", got.Reward, got.CI.Reward, evaluate.MReward},
		{"squad_f1", got.SquadF1, got.CI.SquadF1, evaluate.MSquadF1},
	} {
		est, ok := sys.Metrics[c.metric]
		if !ok || c.iv == nil {
			t.Fatalf("%s: himes eval has it %v, the loop's interval %v", c.name, ok, c.iv)
		}
		// The means are summed in another order (turn by turn, conversation
		// by conversation): equal up to rounding. The intervals are one
		// computation: equal bit for bit.
		if math.Abs(c.mean-est.Mean) > 1e-12 || c.iv.Lo != est.Lo || c.iv.Hi != est.Hi {
			t.Errorf("%s: in-loop %v [%v, %v], himes eval %v [%v, %v]", c.name, c.mean, c.iv.Lo, c.iv.Hi, est.Mean, est.Lo, est.Hi)
		}
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"rougeL_f1", got.RougeLF1, sys.Metrics[evaluate.MRougeF1].Mean},
		{"em", got.EM, sys.Metrics[evaluate.MEM].Mean},
		{"hit", got.Hit, sys.Metrics[evaluate.MHit].Mean},
		{"squad_em", got.SquadEM, sys.Metrics[evaluate.MSquadEM].Mean},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s: in-loop %v, himes eval %v", c.name, c.got, c.want)
		}
	}
	if est := sys.Metrics[evaluate.MRecall10]; est.Turns != 4 || est.Clusters != 3 {
		t.Errorf("himes eval's recall_10 over %d turns of %d conversations, want 4 of 3", est.Turns, est.Clusters)
	}
	if got.Compared != len(turns) || got.Failed != 0 {
		t.Errorf("compared %d, failed %d", got.Compared, got.Failed)
	}
}
