package evaluate

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/retrieval"
)

// The evaluator's three pieces, shared by `himes eval` (Evaluate), the
// training loop's in-loop evaluation (grpo) and the memory-quantization
// ablation, so that they cannot drift apart: the per-turn retrieval
// metrics, the conversations a set of turns falls into, and the
// cluster-bootstrap estimates over those conversations.

// Conversations groups turns by conversation: per conversation, in order of
// first appearance, the indices of its turns sorted by turn number (ties
// keep their input order). Conversations are the clusters of the bootstrap
// and of the paired tests, and the order in which Evaluate runs a
// conversation's turns (long-term memory sees them in order).
func Conversations(turns []datasets.Turn) [][]int {
	pos := map[string]int{}
	var out [][]int
	for i, t := range turns {
		p, ok := pos[t.ConvID]
		if !ok {
			p = len(out)
			pos[t.ConvID] = p
			out = append(out, nil)
		}
		out[p] = append(out[p], i)
	}
	for _, c := range out {
		slices.SortStableFunc(c, func(a, b int) int { return cmp.Compare(turns[a].Turn, turns[b].Turn) })
	}
	return out
}

// RankingScores are the retrieval metrics of one judged turn's passage
// ranking, with trec_eval's definitions (evaluate/ir).
type RankingScores struct {
	RecipRank, NDCG3, Recall10, Recall100 float64
}

// ScoreRanking scores a turn's passage ranking against its judgments
// (datasets.Turn.Qrels). Like trec_eval, a judged turn with no relevant
// passage scores 0; a turn without judgments has no retrieval metrics, and
// callers leave it out rather than score it.
func ScoreRanking(run []retrieval.Scored, qrels map[string]int) RankingScores {
	return RankingScores{
		RecipRank: ir.RecipRank(run, qrels),
		NDCG3:     ir.NDCGCut(run, qrels, 3),
		Recall10:  ir.Recall(run, qrels, 10),
		Recall100: ir.Recall(run, qrels, 100),
	}
}

// byConversation lays per-turn values out as conversation → values, in the
// order of convs.
func byConversation(convs [][]int, perTurn []float64) [][]float64 {
	out := make([][]float64, len(convs))
	for c, idx := range convs {
		out[c] = make([]float64, len(idx))
		for k, i := range idx {
			out[c][k] = perTurn[i]
		}
	}
	return out
}

// Estimate is the mean of per-turn values over the turns that have one
// (NaN: the turn failed or the metric does not apply to it), with its
// cluster-bootstrap interval resampling the conversations convs
// (Conversations of the same turns). stats.ErrNoData when no turn has a
// value.
func Estimate(convs [][]int, perTurn []float64, cfg stats.Config) (stats.Estimate, error) {
	return stats.Bootstrap(byConversation(convs, perTurn), cfg)
}

// Compare is the paired comparison of two systems' per-turn values on the
// same turns (a turn where either is NaN is left out), over the
// conversations convs. stats.ErrNoData when no turn has both.
func Compare(convs [][]int, sys, base []float64, cfg stats.Config) (stats.Comparison, error) {
	if len(sys) != len(base) {
		return stats.Comparison{}, fmt.Errorf("compare: %d turns vs %d in the baseline", len(sys), len(base))
	}
	return stats.Paired(byConversation(convs, sys), byConversation(convs, base), cfg)
}

// DefaultStats is `himes eval`'s default resampling (2000 resamples, 95%)
// seeded with the run's seed: the training loop's evaluations use it, so
// himes eval on a run's checkpoint reproduces their intervals.
func DefaultStats(seed int64) stats.Config {
	c := stats.DefaultConfig()
	c.Seed = uint64(seed)
	return c
}
