package stats

import (
	"fmt"
	"slices"
)

// Spearman is Spearman's ρ between x and y: Pearson's r of their ranks,
// tied values sharing the mean of their ranks (scipy.stats.spearmanr). ok is
// false when it is undefined: fewer than two items, or either side constant.
func Spearman(x, y []float64) (rho float64, ok bool, err error) {
	if len(x) != len(y) {
		return 0, false, fmt.Errorf("spearman: %d vs %d values", len(x), len(y))
	}
	return Pearson(Ranks(x), Ranks(y))
}

// Ranks are the 1-based ranks of xs in ascending order, ties sharing the
// mean of the ranks they span ("average" ranking).
func Ranks(xs []float64) []float64 {
	idx := make([]int, len(xs))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch {
		case xs[a] < xs[b]:
			return -1
		case xs[a] > xs[b]:
			return 1
		}
		return 0
	})
	r := make([]float64, len(xs))
	for i := 0; i < len(idx); {
		j := i + 1
		for j < len(idx) && xs[idx[j]] == xs[idx[i]] {
			j++
		}
		avg := float64(i+j+1) / 2 // ranks i+1..j
		for k := i; k < j; k++ {
			r[idx[k]] = avg
		}
		i = j
	}
	return r
}
