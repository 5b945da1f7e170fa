package retrieval

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// trecOrder sorts a run the way trec_eval 10.0 does before evaluating: score
// descending, ties by docno descending (strcmp). Duplicate docnos keep their
// first (best-ranked) occurrence.
func trecOrder(run []Scored) []Scored {
	r := slices.Clone(run)
	slices.SortStableFunc(r, func(a, b Scored) int {
		switch {
		case a.Score > b.Score:
			return -1
		case a.Score < b.Score:
			return 1
		}
		return -strings.Compare(a.ID, b.ID)
	})
	seen := make(map[string]bool, len(r))
	out := r[:0]
	for _, s := range r {
		if !seen[s.ID] {
			seen[s.ID] = true
			out = append(out, s)
		}
	}
	return out
}

func numRelevant(qrels map[string]int) int {
	n := 0
	for _, rel := range qrels {
		if rel > 0 {
			n++
		}
	}
	return n
}

// RecipRank is trec_eval's recip_rank: 1/rank of the first relevant document
// (relevance > 0) over the whole run, 0 if none is retrieved.
func RecipRank(run []Scored, qrels map[string]int) float64 {
	for i, s := range trecOrder(run) {
		if qrels[s.ID] > 0 {
			return 1 / float64(i+1)
		}
	}
	return 0
}

// NDCGCut is trec_eval's ndcg_cut_k with linear gain (gain = relevance
// value, discount log2(rank+1)); the ideal ranking sorts the judged
// relevances in descending order. 0 when no document is relevant.
func NDCGCut(run []Scored, qrels map[string]int, k int) float64 {
	dcg := 0.0
	for i, s := range trecOrder(run) {
		if i >= k {
			break
		}
		if g := qrels[s.ID]; g > 0 {
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
func Recall(run []Scored, qrels map[string]int, k int) float64 {
	nrel := numRelevant(qrels)
	if nrel == 0 {
		return 0
	}
	hit := 0
	for i, s := range trecOrder(run) {
		if i >= k {
			break
		}
		if qrels[s.ID] > 0 {
			hit++
		}
	}
	return float64(hit) / float64(nrel)
}

// WriteTRECRun writes one query's ranking as TREC run lines
// "qid Q0 docno rank score tag", in trec_eval's order, ranks from 1.
func WriteTRECRun(w io.Writer, qid string, run []Scored, tag string) error {
	if strings.ContainsAny(qid, " \t\n") || strings.ContainsAny(tag, " \t\n") || tag == "" {
		return fmt.Errorf("trec run: qid %q and tag %q must be non-empty and contain no whitespace", qid, tag)
	}
	bw := bufio.NewWriter(w)
	for i, s := range trecOrder(run) {
		if strings.ContainsAny(s.ID, " \t\n") || s.ID == "" {
			return fmt.Errorf("trec run: query %s: docno %q must be non-empty and contain no whitespace", qid, s.ID)
		}
		if _, err := fmt.Fprintf(bw, "%s Q0 %s %d %s %s\n", qid, s.ID, i+1,
			strconv.FormatFloat(s.Score, 'g', -1, 64), tag); err != nil {
			return fmt.Errorf("trec run: %w", err)
		}
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("trec run: %w", err)
	}
	return nil
}
