package memory

import (
	"math"
	"slices"

	"github.com/himes-rl/himes/analysis"
)

// The ways activation may fuse BM25 with the cosine (Config.Fusion).
const (
	// FusionNone: the activation score alone (cosine and the other signals).
	FusionNone = "none"
	// FusionRRF: reciprocal-rank fusion of the activation score's ranking
	// and BM25's over the visible memories, 1/(k+rank) summed (fusion_k).
	FusionRRF = "rrf"
	// FusionLinear: (1−λ)·minmax(activation score) + λ·minmax(BM25) over
	// the visible memories (lexical_weight λ).
	FusionLinear = "linear"
)

// BM25 parameters of the memory index (Lucene's defaults for short texts
// are no better on statements of a dozen words; Pyserini's k1, b).
const (
	lexK1 = 0.9
	lexB  = 0.4
)

// lexIndex is BM25 over a store's memories: document frequencies over all
// of them (every user's statements and questions), so a word common to
// many memories weighs little; a user's visible memories are far too few
// to estimate it from.
type lexIndex struct {
	an    analysis.Analyzer
	tf    []map[string]int // per entry
	dl    []float64
	df    map[string]int
	n     float64
	avgdl float64
}

func newLexIndex(entries []Entry) *lexIndex {
	an, _ := analysis.New(analysis.English)
	x := &lexIndex{an: an, tf: make([]map[string]int, len(entries)), dl: make([]float64, len(entries)), df: map[string]int{}, n: float64(len(entries))}
	total := 0.0
	for i, e := range entries {
		tf := map[string]int{}
		toks := an.Tokenize(e.Text)
		for _, t := range toks {
			tf[t]++
		}
		for t := range tf {
			x.df[t]++
		}
		x.tf[i], x.dl[i] = tf, float64(len(toks))
		total += x.dl[i]
	}
	if len(entries) > 0 {
		x.avgdl = total / x.n
	}
	return x
}

// queryTerms are the query's distinct terms.
func (x *lexIndex) queryTerms(query string) []string {
	ts := x.an.Tokenize(query)
	slices.Sort(ts)
	return slices.Compact(ts)
}

// score is BM25 (Lucene's idf, log(1 + (N − df + 0.5)/(df + 0.5))) of entry
// i for the query terms.
func (x *lexIndex) score(terms []string, i int) float64 {
	s := 0.0
	for _, t := range terms {
		f := float64(x.tf[i][t])
		if f == 0 {
			continue
		}
		df := float64(x.df[t])
		idf := math.Log(1 + (x.n-df+0.5)/(df+0.5))
		norm := 1.0
		if x.avgdl > 0 {
			norm = 1 - lexB + lexB*x.dl[i]/x.avgdl
		}
		s += idf * f * (lexK1 + 1) / (f + lexK1*norm)
	}
	return s
}

// fuse replaces scores with the fusion of scores and lex (one per visible
// memory, same order) that cfg names. Ranks for RRF are 1-based, ties
// sharing the better rank; min–max of a constant list is 0.
func fuse(cfg Config, scores, lex []float64) []float64 {
	out := make([]float64, len(scores))
	switch cfg.Fusion {
	case FusionRRF:
		rs, rl := ranks(scores), ranks(lex)
		for i := range out {
			out[i] = 1/(cfg.FusionK+rs[i]) + 1/(cfg.FusionK+rl[i])
		}
	case FusionLinear:
		ns, nl := minmax(scores), minmax(lex)
		for i := range out {
			out[i] = (1-cfg.LexicalWeight)*ns[i] + cfg.LexicalWeight*nl[i]
		}
	default:
		copy(out, scores)
	}
	return out
}

// ranks are 1-based ranks by descending value; equal values share the
// best rank among them.
func ranks(v []float64) []float64 {
	r := make([]float64, len(v))
	for i := range v {
		k := 1
		for j := range v {
			if v[j] > v[i] {
				k++
			}
		}
		r[i] = float64(k)
	}
	return r
}

func minmax(v []float64) []float64 {
	out := make([]float64, len(v))
	if len(v) == 0 {
		return out
	}
	lo, hi := slices.Min(v), slices.Max(v)
	if hi == lo {
		return out
	}
	for i, x := range v {
		out[i] = (x - lo) / (hi - lo)
	}
	return out
}
