// Package trecmeasure holds trec_eval's per-query measures (recip_rank,
// ndcg_cut, recall) as pure functions of a ranking already in trec_eval's
// order (passage ids, best first, no duplicates) and the query's judgments.
// evaluate/ir applies them to scored runs after sorting them as trec_eval
// does; the reward (hser) applies them to a rollout's own ranking. One
// definition serves both, so a retrieval reward is exactly the metric it is
// evaluated with.
package trecmeasure

import (
	"math"
	"slices"
)

// NumRelevant is the number of judged documents with relevance > 0.
func NumRelevant(qrels map[string]int) int {
	n := 0
	for _, rel := range qrels {
		if rel > 0 {
			n++
		}
	}
	return n
}

// RecipRank is trec_eval's recip_rank: 1/rank of the first relevant
// document (relevance > 0) over the whole ranking, 0 if none is retrieved.
func RecipRank(ranking []string, qrels map[string]int) float64 {
	for i, id := range ranking {
		if qrels[id] > 0 {
			return 1 / float64(i+1)
		}
	}
	return 0
}

// NDCGCut is trec_eval's ndcg_cut_k with linear gain (gain = relevance
// value, discount log2(rank+1)); the ideal ranking sorts the judged
// relevances in descending order. 0 when no document is relevant.
func NDCGCut(ranking []string, qrels map[string]int, k int) float64 {
	dcg := 0.0
	for i, id := range ranking {
		if i >= k {
			break
		}
		if g := qrels[id]; g > 0 {
			dcg += float64(g) / math.Log2(float64(i+2))
		}
	}
	var gains []int
	for _, g := range qrels {
		if g > 0 {
			gains = append(gains, g)
		}
	}
	slices.Sort(gains)
	slices.Reverse(gains)
	ideal := 0.0
	for i, g := range gains {
		if i >= k {
			break
		}
		ideal += float64(g) / math.Log2(float64(i+2))
	}
	if ideal == 0 {
		return 0
	}
	return dcg / ideal
}

// Recall is trec_eval's recall_k: relevant documents in the top k over all
// relevant documents; 0 when none is relevant.
func Recall(ranking []string, qrels map[string]int, k int) float64 {
	nrel := NumRelevant(qrels)
	if nrel == 0 {
		return 0
	}
	hit := 0
	for i, id := range ranking {
		if i >= k {
			break
		}
		if qrels[id] > 0 {
			hit++
		}
	}
	return float64(hit) / float64(nrel)
}
