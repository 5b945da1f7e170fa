package ir

import (
	"bufio"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/internal/trecmeasure"
	"github.com/himes-rl/himes/retrieval"
)

// trecOrder sorts a run the way trec_eval 10.0 does before evaluating: score
// descending, ties by docno descending (strcmp). Duplicate docnos keep their
// first (best-ranked) occurrence.
func trecOrder(run []retrieval.Scored) []retrieval.Scored {
	r := slices.Clone(run)
	slices.SortStableFunc(r, func(a, b retrieval.Scored) int {
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

// ids is the run's passage ids in trec_eval's order.
func ids(run []retrieval.Scored) []string {
	r := trecOrder(run)
	out := make([]string, len(r))
	for i, s := range r {
		out[i] = s.ID
	}
	return out
}

// RecipRank is trec_eval's recip_rank (trecmeasure.RecipRank) of the run.
func RecipRank(run []retrieval.Scored, qrels map[string]int) float64 {
	return trecmeasure.RecipRank(ids(run), qrels)
}

// NDCGCut is trec_eval's ndcg_cut_k (trecmeasure.NDCGCut) of the run.
func NDCGCut(run []retrieval.Scored, qrels map[string]int, k int) float64 {
	return trecmeasure.NDCGCut(ids(run), qrels, k)
}

// Recall is trec_eval's recall_k (trecmeasure.Recall) of the run.
func Recall(run []retrieval.Scored, qrels map[string]int, k int) float64 {
	return trecmeasure.Recall(ids(run), qrels, k)
}

// WriteTRECRun writes one query's ranking as TREC run lines
// "qid Q0 docno rank score tag", in trec_eval's order, ranks from 1.
func WriteTRECRun(w io.Writer, qid string, run []retrieval.Scored, tag string) error {
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
