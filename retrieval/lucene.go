package retrieval

import (
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// Scoring names accepted in configs and recorded in persisted indexes.
const (
	// ScoringExact is the default: Lucene's BM25 formula in float64 with
	// exact document lengths, a query term counted once (see Index).
	ScoringExact = "exact"
	// ScoringLucene is what Lucene 9/10 computes for Anserini's (Pyserini's)
	// bag-of-words query; see luceneStats.
	ScoringLucene = "lucene"
)

// checkScoring validates a scoring name ("" is the default, exact).
func checkScoring(s string) error {
	switch s {
	case "", ScoringExact, ScoringLucene:
		return nil
	}
	return fmt.Errorf("scoring %q: want %s or %s", s, ScoringExact, ScoringLucene)
}

// normScoring maps "" (indexes written before scoring was recorded, which
// were all exact) to ScoringExact.
func normScoring(s string) string {
	if s == "" {
		return ScoringExact
	}
	return s
}

// luceneStats are the statistics of Lucene's BM25Similarity (Lucene 9/10,
// org.apache.lucene.search.similarities.BM25Similarity) in its own float32
// arithmetic, for Anserini's BagOfWordsQueryGenerator query:
//
//   - k1, b are floats (Anserini passes 0.9f, 0.4f);
//   - idf(t) = (float) log(1 + (docCount − df + 0.5) / (df + 0.5)) in double;
//   - avgdl = (float) (sumTotalTermFreq / (double) docCount), docCount
//     counting the documents with at least one token;
//   - each document's length is stored as one byte, SmallFloat.intToByte4
//     (exact below 40 tokens, 4 significant bits above), and
//     cache[n] = 1f / (k1 · ((1 − b) + b · byte4ToInt(n) / avgdl)) in float;
//   - a query token repeated c times is one clause with boost c (Anserini
//     groups tokens with a count; older Anserini added one clause per token
//     and Lucene's BooleanQuery.rewrite merges duplicate SHOULD clauses by
//     summing their boosts: the same query), weight = (float) c · idf;
//   - a clause scores weight − weight / (1f + freq · cache[norm]) in float;
//   - a document's score is the sum of its clause scores accumulated in
//     double and rounded to float (BooleanScorer's bucket, DisjunctionSum-,
//     WAND- and MaxScore scorers all sum float clause scores into a double);
//   - ties are ordered by the id string ascending (Anserini's
//     BREAK_SCORE_TIES_BY_DOCID sort), i.e. by ascending document number.
//
// Java's float arithmetic is IEEE single precision without fused
// multiply-adds; the explicit float32 conversions below forbid Go from
// fusing. One caveat: Java's Math.log may differ from Go's math.Log in the
// last bit of a double, which reaches the float idf only when the double is
// within an ulp of a float rounding boundary.
//
// The float idf of each term is kept in Index.idf (as a float64 holding the
// float exactly), so the on-disk index reads it from its idf section; the
// one-byte norms are precomputed in memory and derived from the stored
// lengths on disk (intToByte4 is a few instructions).
type luceneStats struct {
	k1, b    float32
	avgdl    float32
	docCount int
	cache    [256]float32
	norm     []uint8  // per document, SmallFloat.intToByte4(length); nil on disk
	docLen   []uint32 // the exact lengths, read when norm is nil
}

// numFreeValues is SmallFloat's NUM_FREE_VALUES: 255 − longToInt4(MaxInt32).
var numFreeValues = 255 - longToInt4(math.MaxInt32)

// longToInt4 is SmallFloat.longToInt4: a float-like encoding of a
// non-negative integer keeping 4 significant bits.
func longToInt4(i int64) int {
	numBits := 64 - bits.LeadingZeros64(uint64(i))
	if numBits < 4 {
		return int(i) // subnormal
	}
	shift := numBits - 4
	encoded := int(uint64(i)>>uint(shift)) & 0x07 // the top bit is implicit
	return encoded | (shift+1)<<3
}

// int4ToLong is SmallFloat.int4ToLong.
func int4ToLong(i int) int64 {
	b := int64(i & 0x07)
	shift := (i >> 3) - 1
	if shift == -1 {
		return b
	}
	return (b | 0x08) << uint(shift)
}

// intToByte4 is SmallFloat.intToByte4, Lucene's one-byte length norm.
func intToByte4(i int) uint8 {
	if i < numFreeValues {
		return uint8(i)
	}
	return uint8(numFreeValues + longToInt4(int64(i-numFreeValues)))
}

// byte4ToInt is SmallFloat.byte4ToInt.
func byte4ToInt(b uint8) int {
	i := int(b)
	if i < numFreeValues {
		return i
	}
	return int(int64(numFreeValues) + int4ToLong(i-numFreeValues))
}

// newLuceneStats derives Lucene's statistics from the index's exact ones
// and sets ix.idf to Lucene's float idf.
func newLuceneStats(ix *Index, totalLen uint64) *luceneStats {
	norm := make([]uint8, len(ix.docLen))
	docCount := 0
	for d, l := range ix.docLen {
		if l > 0 {
			docCount++
		}
		norm[d] = intToByte4(int(min(l, math.MaxInt32)))
	}
	ls := lucenePartStats(ix.params, totalLen, docCount)
	ls.norm = norm
	ix.idf = make([]float64, len(ix.post.df))
	for t, df := range ix.post.df {
		ix.idf[t] = float64(luceneIDF(df, docCount))
	}
	return ls
}

// lucenePartStats are the statistics that do not depend on a document or a
// term: k1, b, avgdl and the norm cache.
func lucenePartStats(p BM25Params, totalLen uint64, docCount int) *luceneStats {
	ls := &luceneStats{k1: float32(p.K1), b: float32(p.B), docCount: docCount}
	if docCount > 0 {
		ls.avgdl = float32(float64(totalLen) / float64(docCount))
	}
	for n := range ls.cache {
		// (1 − b) + b·dl/avgdl, k1·that, then 1/that, each rounded to float
		dl := float32(byte4ToInt(uint8(n)))
		x := float32(float32(ls.b*dl) / ls.avgdl)
		x = float32(float32(1-ls.b) + x)
		ls.cache[n] = float32(1 / float32(ls.k1*x))
	}
	return ls
}

// luceneIDF is BM25Similarity's idf: (float) log(1 + (docCount − df + 0.5) / (df + 0.5)).
func luceneIDF(df uint32, docCount int) float32 {
	n := float64(docCount)
	return float32(math.Log(1 + (n-float64(df)+0.5)/(float64(df)+0.5)))
}

// score is one clause's score: weight − weight / (1 + freq · cache[norm]).
func (ls *luceneStats) score(w float32, tf uint32, doc uint32) float32 {
	return clauseAt(w, ls.tfNorm(tf, doc))
}

// tfNorm is the clause's saturation input, freq · cache[norm], in float:
// the score increases with it, so its maximum over a term's postings bounds
// the term's clause.
func (ls *luceneStats) tfNorm(tf uint32, doc uint32) float32 {
	var nb uint8
	if ls.norm != nil {
		nb = ls.norm[doc]
	} else {
		nb = intToByte4(int(min(ls.docLen[doc], math.MaxInt32)))
	}
	return float32(float32(tf) * ls.cache[nb])
}

// clauseAt is the clause score of weight w at saturation input x, in the
// operations score uses; correctly rounded float operations are monotone, so
// clauseAt(w, max x) bounds every clause of the term.
func clauseAt(w, x float32) float32 { return float32(w - float32(w/float32(1+x))) }

// luceneMaxTFNorm is the per-term maximum of tfNorm over the postings,
// stored (as float64) where exact scoring keeps its MaxScore bounds.
func luceneMaxTFNorm(ix *Index) []float64 {
	out := make([]float64, len(ix.post.df))
	var c cursor
	for t := range out {
		m := float32(0)
		for c.init(ix.post, uint32(t)); c.doc() != math.MaxUint32; c.next() {
			m = max(m, ix.luc.tfNorm(c.tf(), c.doc()))
		}
		out[t] = float64(m)
	}
	return out
}

// lucQueryTerm is one distinct known query term with its clause weight.
type lucQueryTerm struct {
	t uint32
	w float32
}

// luceneQuery groups the analyzed tokens into distinct known terms (first
// appearance order) weighted (float) count · idf.
func (ix *Index) luceneQuery(tokens []string) []lucQueryTerm {
	var qs []lucQueryTerm
	var counts []int
	for _, tok := range tokens {
		t, ok := ix.termID(tok)
		if !ok {
			continue
		}
		i := slices.IndexFunc(qs, func(q lucQueryTerm) bool { return q.t == t })
		if i < 0 {
			qs = append(qs, lucQueryTerm{t: t})
			counts = append(counts, 0)
			i = len(qs) - 1
		}
		counts[i]++
	}
	for i := range qs {
		qs[i].w = float32(float32(counts[i]) * float32(ix.idf[qs[i].t]))
	}
	return qs
}

// searchLucene returns the top k under Lucene scoring: term at a time into
// a dense accumulator on small collections, otherwise document at a time
// with MaxScore pruning (memory proportional to the query). Both sum each
// document's clause scores in the same (query) order.
func (ix *Index) searchLucene(tokens []string, k int, dense bool) []Hit {
	qs := ix.luceneQuery(tokens)
	if k <= 0 || len(qs) == 0 {
		return nil
	}
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	var top topK
	top.reset(scoreDocAsc, k, sc.heap)
	ls := ix.luc
	if dense {
		n := ix.Len()
		if len(sc.acc) != n {
			sc.acc = make([]float64, n)
		}
		if len(sc.seen) != (n+63)/64 {
			sc.seen = make([]uint64, (n+63)/64)
		}
		acc, seen, touched := sc.acc, sc.seen, sc.touched[:0]
		var c cursor
		for _, q := range qs {
			for c.init(ix.post, q.t); c.doc() != math.MaxUint32; c.next() {
				d := c.doc()
				// a clause may score 0 (1 + freq·cache rounds to 1), so
				// "touched" is a bit, not a non-zero sum
				if seen[d/64]&(1<<(d%64)) == 0 {
					seen[d/64] |= 1 << (d % 64)
					touched = append(touched, d)
				}
				acc[d] += float64(ls.score(q.w, c.tf(), d))
			}
		}
		for _, d := range touched {
			if hit := (Hit{Doc: int(d), Score: float64(float32(acc[d]))}); top.accepts(hit) {
				top.push(hit)
			}
			acc[d] = 0
			seen[d/64] = 0
		}
		sc.touched = touched
	} else {
		ix.luceneMaxScore(sc, qs, &top)
	}
	var out []Hit
	out, sc.heap = top.sorted()
	return out
}

// luceneMaxScore is Index.maxScore under Lucene scoring: terms are bounded
// by clauseAt(w, max tfNorm) (Index.maxSat holds max tfNorm under lucene).
func (ix *Index) luceneMaxScore(sc *searchScratch, qs []lucQueryTerm, top *topK) {
	ix.maxScore(sc, top, len(qs), func(i int) (uint32, float64, float64) {
		return qs[i].t, float64(qs[i].w), float64(clauseAt(qs[i].w, float32(ix.maxSat[qs[i].t])))
	})
}

// searchLuceneExhaustive is the plain reference for searchLucene: every
// matching document scored into a map, all sorted.
func (ix *Index) searchLuceneExhaustive(tokens []string, k int) []Hit {
	qs := ix.luceneQuery(tokens)
	acc := map[uint32]float64{}
	var c cursor
	for _, q := range qs {
		for c.init(ix.post, q.t); c.doc() != math.MaxUint32; c.next() {
			acc[c.doc()] += float64(ix.luc.score(q.w, c.tf(), c.doc()))
		}
	}
	hits := make([]Hit, 0, len(acc))
	for d, s := range acc {
		hits = append(hits, Hit{Doc: int(d), Score: float64(float32(s))})
	}
	slices.SortFunc(hits, scoreDocAsc.compare)
	return hits[:min(k, len(hits))]
}
