package retrieval

import (
	"github.com/himes-rl/himes/retrieval/corpus"
)

// PassageRanking is the passage-level ranking of a result, as written to a
// TREC run and scored by the IR metrics: the final chunks, then the other
// candidates, each passage at its best position. When the scores disagree
// with that order as trec_eval would sort them (after memory re-ranking the
// two stages' scores are not comparable), they are replaced by n−rank so
// trec_eval sorts exactly as displayed. Training, eval and search all use it.
func PassageRanking(res Result) []Scored {
	seen := map[string]bool{}
	var run []Scored
	add := func(pid string, s float64) {
		if pid != "" && !seen[pid] {
			seen[pid] = true
			run = append(run, Scored{ID: pid, Score: s})
		}
	}
	for _, c := range res.Chunks {
		pid := c.PassageID
		if pid == "" {
			pid = corpus.ChunkPassageID(c.ID)
		}
		add(pid, c.Score)
	}
	for _, c := range res.Trace.Candidates {
		add(corpus.ChunkPassageID(c.ID), c.Score)
	}
	for i := 1; i < len(run); i++ {
		// trec_eval orders by score, then docno descending
		if a, b := run[i-1], run[i]; b.Score > a.Score || (b.Score == a.Score && b.ID > a.ID) {
			for j := range run {
				run[j].Score = float64(len(run) - j)
			}
			break
		}
	}
	return run
}

// PassageRanking is the package function PassageRanking, for callers that
// hold a pipeline.
func (p *Pipeline) PassageRanking(res Result) []Scored { return PassageRanking(res) }
