package retrieval

import (
	"errors"
	"slices"

	"github.com/himes-rl/himes/embedding"
)

// Rerank is HiMeS's memory-aware re-ranking: score(c) = mean over h in H_n
// of cos(E(c), E(h)). With retrievalWeight w > 0 the final score is
// (1−w)·memory + w·retrieval, the retrieval score min–max normalized over the
// candidates (all-equal scores normalize to 1) — an ablation, off by
// default. Ties keep retrieval order. With no memories the candidates are
// returned unchanged, in retrieval order.
func Rerank(cands []Ranked, candVecs [][]float32, memVecs [][]float32, retrievalWeight float64) ([]Ranked, error) {
	if len(candVecs) != len(cands) {
		return nil, errors.New("rerank: one vector per candidate required")
	}
	out := slices.Clone(cands)
	if len(memVecs) == 0 {
		return out, nil
	}
	lo, hi := 0.0, 0.0
	for i, c := range cands {
		if i == 0 || c.Score < lo {
			lo = c.Score
		}
		if i == 0 || c.Score > hi {
			hi = c.Score
		}
	}
	for i := range out {
		mem := 0.0
		for _, h := range memVecs {
			mem += embedding.Cosine(candVecs[i], h)
		}
		mem /= float64(len(memVecs))
		score := mem
		if retrievalWeight > 0 {
			norm := 1.0
			if hi > lo {
				norm = (cands[i].Score - lo) / (hi - lo)
			}
			score = (1-retrievalWeight)*mem + retrievalWeight*norm
		}
		out[i].Score = score
	}
	slices.SortStableFunc(out, func(a, b Ranked) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return 0
	})
	return out, nil
}
