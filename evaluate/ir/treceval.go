package ir

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/internal/trecmeasure"
	"github.com/himes-rl/himes/retrieval"
)

// TRECMeasure is one trec_eval measure: Name is trec_eval's (num_q,
// num_ret, num_rel, num_rel_ret, map, recip_rank, P, recall, ndcg,
// ndcg_cut) and Cutoff the depth of P, recall and ndcg_cut.
type TRECMeasure struct {
	Name   string
	Cutoff int
}

// Label is the measure as trec_eval prints it: "ndcg_cut_3", "recall_10".
func (m TRECMeasure) Label() string {
	if m.Cutoff > 0 {
		return m.Name + "_" + strconv.Itoa(m.Cutoff)
	}
	return m.Name
}

// count reports whether the measure is a count (printed as an integer and
// summed, not averaged, over queries).
func (m TRECMeasure) count() bool {
	switch m.Name {
	case "num_q", "num_ret", "num_rel", "num_rel_ret":
		return true
	}
	return false
}

// DefaultTRECMeasures are the measures `himes trec-eval` prints without -m:
// the counts, map, recip_rank, P at 5 and 10, recall at 10 and 100 and
// ndcg_cut at 3 and 10 (himes eval's recip_rank, ndcg_cut_3, recall_10 and
// recall_100 among them).
var DefaultTRECMeasures = []string{"num_q", "num_ret", "num_rel", "num_rel_ret", "map", "recip_rank",
	"P.5,10", "recall.10,100", "ndcg_cut.3,10"}

// ParseTRECMeasures parses trec_eval's -m syntax: "map", "recall.10,100",
// "ndcg_cut.3". Measures with a cutoff need one (trec_eval's default cutoff
// lists are long); cutoffs are positive.
func ParseTRECMeasures(specs []string) ([]TRECMeasure, error) {
	var out []TRECMeasure
	for _, spec := range specs {
		name, params, hasParams := strings.Cut(spec, ".")
		switch name {
		case "num_q", "num_ret", "num_rel", "num_rel_ret", "map", "recip_rank", "ndcg":
			if hasParams {
				return nil, fmt.Errorf("measure %q: %s takes no cutoff", spec, name)
			}
			out = append(out, TRECMeasure{Name: name})
		case "P", "recall", "ndcg_cut":
			if !hasParams || params == "" {
				return nil, fmt.Errorf("measure %q: give cutoffs, e.g. %s.10 or %s.5,10", spec, name, name)
			}
			for c := range strings.SplitSeq(params, ",") {
				k, err := strconv.Atoi(c)
				if err != nil || k < 1 {
					return nil, fmt.Errorf("measure %q: cutoff %q must be a positive integer", spec, c)
				}
				out = append(out, TRECMeasure{Name: name, Cutoff: k})
			}
		default:
			return nil, fmt.Errorf("measure %q: unknown (supported: num_q, num_ret, num_rel, num_rel_ret, map, recip_rank, ndcg, P.k, recall.k, ndcg_cut.k)", spec)
		}
	}
	return out, nil
}

// TRECQueryEval is one query's measures, in the order of the measures.
type TRECQueryEval struct {
	QID    string
	Values []float64
}

// TRECEvalResult is trec_eval's output: per query, and over all of them.
type TRECEvalResult struct {
	Measures []TRECMeasure
	Queries  []TRECQueryEval // sorted by qid (strcmp), as trec_eval prints them
	// All: means over the evaluated queries; counts are sums and num_q is
	// the number of queries.
	All []float64
}

// TRECEval evaluates run against qrels as trec_eval does: the queries of
// the run that have judgments, or with complete (trec_eval -c) every judged
// query, those missing from the run scoring 0. Documents are ranked by
// score, ties by docno descending; relevance ≥ 1 is relevant and is the
// gain of ndcg.
func TRECEval(run map[string][]retrieval.Scored, qrels map[string]map[string]int, measures []TRECMeasure, complete bool) TRECEvalResult {
	var qids []string
	for q := range qrels {
		if _, ok := run[q]; ok || complete {
			qids = append(qids, q)
		}
	}
	slices.Sort(qids)
	res := TRECEvalResult{Measures: measures, All: make([]float64, len(measures))}
	for _, q := range qids {
		ranked, rel := trecOrder(run[q]), qrels[q]
		qe := TRECQueryEval{QID: q, Values: make([]float64, len(measures))}
		for i, m := range measures {
			qe.Values[i] = trecMeasure(m, ranked, rel)
			res.All[i] += qe.Values[i]
		}
		res.Queries = append(res.Queries, qe)
	}
	for i, m := range measures {
		if !m.count() && len(qids) > 0 {
			res.All[i] /= float64(len(qids))
		}
	}
	return res
}

// trecMeasure is one measure of one query; ranked is in trec_eval's order.
func trecMeasure(m TRECMeasure, ranked []retrieval.Scored, rel map[string]int) float64 {
	relRet := func(k int) int {
		n := 0
		for _, s := range ranked[:min(k, len(ranked))] {
			if rel[s.ID] > 0 {
				n++
			}
		}
		return n
	}
	switch m.Name {
	case "num_q":
		return 1
	case "num_ret":
		return float64(len(ranked))
	case "num_rel":
		return float64(trecmeasure.NumRelevant(rel))
	case "num_rel_ret":
		return float64(relRet(len(ranked)))
	case "map":
		// Average precision: precision at the rank of each relevant
		// retrieved document, over all relevant documents.
		nrel := trecmeasure.NumRelevant(rel)
		if nrel == 0 {
			return 0
		}
		sum, found := 0.0, 0
		for i, s := range ranked {
			if rel[s.ID] > 0 {
				found++
				sum += float64(found) / float64(i+1)
			}
		}
		return sum / float64(nrel)
	case "recip_rank":
		return RecipRank(ranked, rel)
	case "P":
		return float64(relRet(m.Cutoff)) / float64(m.Cutoff)
	case "recall":
		return Recall(ranked, rel, m.Cutoff)
	case "ndcg_cut":
		return NDCGCut(ranked, rel, m.Cutoff)
	case "ndcg":
		return NDCGCut(ranked, rel, math.MaxInt)
	}
	return math.NaN() // ParseTRECMeasures admits no other name
}

// WriteTRECEval prints res as trec_eval does ("%-22s\t%s\t%6.4f", counts as
// integers): with perQuery each query's measures first (num_q is not
// printed per query), then runid and every measure for "all".
func WriteTRECEval(w io.Writer, res TRECEvalResult, perQuery bool, runID string) error {
	bw := bufio.NewWriter(w)
	line := func(m TRECMeasure, qid string, v float64) {
		if m.count() {
			fmt.Fprintf(bw, "%-22s\t%s\t%d\n", m.Label(), qid, int64(v))
		} else {
			fmt.Fprintf(bw, "%-22s\t%s\t%6.4f\n", m.Label(), qid, v)
		}
	}
	if perQuery {
		for _, q := range res.Queries {
			for i, m := range res.Measures {
				if m.Name != "num_q" {
					line(m, q.QID, q.Values[i])
				}
			}
		}
	}
	if runID != "" {
		fmt.Fprintf(bw, "%-22s\t%s\t%s\n", "runid", "all", runID)
	}
	for i, m := range res.Measures {
		line(m, "all", res.All[i])
	}
	return bw.Flush()
}
