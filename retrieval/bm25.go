package retrieval

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"strings"
)

// BM25Params are the Lucene BM25 parameters.
type BM25Params struct {
	K1 float64 `json:"k1"`
	B  float64 `json:"b"`
}

// Index is an in-memory inverted index scored with Lucene's BM25 (Lucene ≥ 8,
// the form Pyserini uses):
//
//	score(q, d) = Σ_{t ∈ q} qtf(t) · idf(t) · tf / (tf + k1·(1 − b + b·|d|/avgdl))
//	idf(t)      = ln(1 + (N − df + 0.5) / (df + 0.5))
//
// Two deliberate differences from Lucene itself: document lengths are exact
// (Lucene quantizes them to one byte), and the query is a set: a repeated
// query term counts once (qtf = 1). That is the convention of the shared
// reference numbers (../shared/data/README.md), which this reproduces.
//
// Documents are numbered 0..N−1 in ascending byte order of their ids (the
// builder requires that order), and ties are broken by the higher document
// number first. That is exactly trec_eval's order (score descending, then
// docno descending by strcmp), so a run written from a ranking evaluates the
// way it is displayed.
//
// An Index is immutable after building and safe for concurrent searches.
type Index struct {
	params BM25Params
	ids    []string
	docLen []uint32
	avgdl  float64
	norm   []float64 // k1·(1 − b + b·|d|/avgdl), per document

	terms   map[string]uint32
	termStr []string
	// Postings of term t are postDocs/postTFs[termOff[t]:termOff[t+1]], by
	// ascending document number.
	termOff  []uint64
	postDocs []uint32
	postTFs  []uint32
	idf      []float64
	maxSat   []float64 // max over t's postings of tf/(tf+norm[d]): the MaxScore bound without weights
}

// Hit is a document number and its score.
type Hit struct {
	Doc   int
	Score float64
}

// BuildIndex indexes texts (one per document) whose ids are strictly
// ascending. The ids and texts slices are not retained beyond ids.
func BuildIndex(ids, texts []string, p BM25Params) (*Index, error) {
	if len(ids) != len(texts) {
		return nil, fmt.Errorf("build index: %d ids but %d texts", len(ids), len(texts))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("build index: no documents")
	}
	if p.K1 < 0 || p.B < 0 || p.B > 1 {
		return nil, fmt.Errorf("build index: need k1 ≥ 0 and b in [0,1], got k1=%v b=%v", p.K1, p.B)
	}
	for i := 1; i < len(ids); i++ {
		if strings.Compare(ids[i-1], ids[i]) >= 0 {
			return nil, fmt.Errorf("build index: document ids must be strictly ascending: %q then %q", ids[i-1], ids[i])
		}
	}
	ix := &Index{params: p, ids: slices.Clone(ids), docLen: make([]uint32, len(ids)), terms: map[string]uint32{}}
	var (
		docs     [][]uint32
		tfs      [][]uint32
		lastSeen []int32 // lastSeen[t] = 1 + last document that contained t
		total    uint64
	)
	for d, text := range texts {
		n := forEachToken(text, func(tok []byte) {
			t, ok := ix.terms[string(tok)]
			if !ok {
				t = uint32(len(ix.termStr))
				s := string(tok)
				ix.terms[s] = t
				ix.termStr = append(ix.termStr, s)
				docs = append(docs, nil)
				tfs = append(tfs, nil)
				lastSeen = append(lastSeen, 0)
			}
			if lastSeen[t] != int32(d+1) {
				lastSeen[t] = int32(d + 1)
				docs[t] = append(docs[t], uint32(d))
				tfs[t] = append(tfs[t], 1)
			} else {
				tfs[t][len(tfs[t])-1]++
			}
		})
		ix.docLen[d] = uint32(n)
		total += uint64(n)
	}
	ix.termOff = make([]uint64, len(docs)+1)
	for t := range docs {
		ix.termOff[t+1] = ix.termOff[t] + uint64(len(docs[t]))
	}
	ix.postDocs = make([]uint32, 0, ix.termOff[len(docs)])
	ix.postTFs = make([]uint32, 0, ix.termOff[len(docs)])
	for t := range docs {
		ix.postDocs = append(ix.postDocs, docs[t]...)
		ix.postTFs = append(ix.postTFs, tfs[t]...)
	}
	ix.finish(total)
	return ix, nil
}

// finish derives the statistics that are not persisted.
func (ix *Index) finish(totalLen uint64) {
	n := len(ix.ids)
	ix.avgdl = float64(totalLen) / float64(n)
	if ix.avgdl == 0 {
		ix.avgdl = 1 // every document empty: lengths cannot matter
	}
	ix.norm = make([]float64, n)
	for d, l := range ix.docLen {
		ix.norm[d] = ix.params.K1 * (1 - ix.params.B + ix.params.B*float64(l)/ix.avgdl)
	}
	nt := len(ix.termStr)
	ix.idf = make([]float64, nt)
	ix.maxSat = make([]float64, nt)
	for t := 0; t < nt; t++ {
		lo, hi := ix.termOff[t], ix.termOff[t+1]
		df := float64(hi - lo)
		ix.idf[t] = math.Log(1 + (float64(n)-df+0.5)/(df+0.5))
		m := 0.0
		for i := lo; i < hi; i++ {
			m = max(m, ix.sat(ix.postTFs[i], ix.postDocs[i]))
		}
		ix.maxSat[t] = m
	}
}

// sat is the saturated term frequency tf/(tf + norm). The explicit float64
// conversions forbid fused multiply-adds, so the pruned and exhaustive
// searches compute bit-identical scores.
func (ix *Index) sat(tf, doc uint32) float64 {
	f := float64(tf)
	return float64(f / float64(f+ix.norm[doc]))
}

// Len is the number of documents.
func (ix *Index) Len() int { return len(ix.ids) }

// ID is the id of document d.
func (ix *Index) ID(d int) string { return ix.ids[d] }

// NumTerms is the vocabulary size.
func (ix *Index) NumTerms() int { return len(ix.termStr) }

// NumPostings is the total number of (term, document) pairs.
func (ix *Index) NumPostings() int { return len(ix.postDocs) }

// Params returns k1 and b.
func (ix *Index) Params() BM25Params { return ix.params }

// AvgDocLen is the mean document length in tokens.
func (ix *Index) AvgDocLen() float64 { return ix.avgdl }

// IDF is the BM25 idf of an analyzed term, 0 for a term not in the index.
func (ix *Index) IDF(term string) float64 {
	t, ok := ix.terms[term]
	if !ok {
		return 0
	}
	return ix.idf[t]
}

// DF is the number of documents containing an analyzed term.
func (ix *Index) DF(term string) int {
	t, ok := ix.terms[term]
	if !ok {
		return 0
	}
	return int(ix.termOff[t+1] - ix.termOff[t])
}

// queryTerm is one distinct known query term with its weight idf.
type queryTerm struct {
	t uint32
	w float64
}

// prepare drops repeated and unknown query tokens, keeping the order of
// first appearance: that order is the canonical summation order of scores.
func (ix *Index) prepare(tokens []string) []queryTerm {
	var qs []queryTerm
	pos := map[uint32]int{}
	for _, tok := range tokens {
		t, ok := ix.terms[tok]
		if !ok {
			continue
		}
		if _, seen := pos[t]; seen {
			continue
		}
		pos[t] = len(qs)
		qs = append(qs, queryTerm{t: t, w: ix.idf[t]})
	}
	return qs
}

// contrib is one term's score contribution.
func contrib(w, sat float64) float64 { return float64(w * sat) }

// better reports whether hit a ranks above hit b (score desc, doc desc).
func better(a, b Hit) bool {
	if a.Score != b.Score {
		return a.Score > b.Score
	}
	return a.Doc > b.Doc
}

// SearchExhaustive is the straightforward reference: score every document
// containing a query term (term at a time, summing in canonical order), sort
// all of them, keep k.
func (ix *Index) SearchExhaustive(tokens []string, k int) []Hit {
	qs := ix.prepare(tokens)
	acc := map[uint32]float64{}
	for _, q := range qs {
		for i := ix.termOff[q.t]; i < ix.termOff[q.t+1]; i++ {
			d := ix.postDocs[i]
			acc[d] += contrib(q.w, ix.sat(ix.postTFs[i], d))
		}
	}
	hits := make([]Hit, 0, len(acc))
	for d, s := range acc {
		hits = append(hits, Hit{Doc: int(d), Score: s})
	}
	slices.SortFunc(hits, func(a, b Hit) int {
		if better(a, b) {
			return -1
		}
		if better(b, a) {
			return 1
		}
		return 0
	})
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

// hitHeap is a min-heap: the worst kept hit on top.
type hitHeap []Hit

func (h hitHeap) Len() int           { return len(h) }
func (h hitHeap) Less(i, j int) bool { return better(h[j], h[i]) }
func (h hitHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *hitHeap) Push(x any)        { *h = append(*h, x.(Hit)) }
func (h *hitHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

type cursor struct {
	docs, tfs []uint32
	pos       int
	w, ub     float64
	qi        int // position in canonical order
}

func (c *cursor) doc() uint32 {
	if c.pos < len(c.docs) {
		return c.docs[c.pos]
	}
	return math.MaxUint32
}

// seek advances to the first posting with document ≥ d (galloping, then
// binary search), because non-essential lists are probed sparsely.
func (c *cursor) seek(d uint32) {
	if c.pos >= len(c.docs) || c.docs[c.pos] >= d {
		return
	}
	step, lo := 1, c.pos
	hi := lo + 1
	for hi < len(c.docs) && c.docs[hi] < d {
		lo = hi
		step *= 2
		hi = lo + step
	}
	hi = min(hi, len(c.docs))
	// invariant: docs[lo] < d, answer in (lo, hi]
	i, _ := slices.BinarySearch(c.docs[lo+1:hi], d)
	c.pos = lo + 1 + i
}

// pruneSlack keeps pruning conservative against rounding: upper bounds are
// summed in a different order than scores, so a bound must fall short of the
// threshold by more than float noise before a document is skipped.
const pruneSlack = 1e-9

// Search returns the top k documents for analyzed query tokens, best first,
// using document-at-a-time MaxScore over a size-k heap. It returns exactly
// what SearchExhaustive returns (same documents, same order, bit-identical
// scores).
func (ix *Index) Search(tokens []string, k int) []Hit {
	if k <= 0 {
		return nil
	}
	qs := ix.prepare(tokens)
	if len(qs) == 0 {
		return nil
	}
	cs := make([]cursor, len(qs))
	for i, q := range qs {
		lo, hi := ix.termOff[q.t], ix.termOff[q.t+1]
		cs[i] = cursor{docs: ix.postDocs[lo:hi], tfs: ix.postTFs[lo:hi], w: q.w, ub: contrib(q.w, ix.maxSat[q.t]), qi: i}
	}
	slices.SortStableFunc(cs, func(a, b cursor) int {
		switch {
		case a.ub < b.ub:
			return -1
		case a.ub > b.ub:
			return 1
		}
		return 0
	})
	prefix := make([]float64, len(cs)) // prefix[i] = Σ_{j≤i} ub_j
	sum := 0.0
	for i := range cs {
		sum += cs[i].ub
		prefix[i] = sum
	}
	h := make(hitHeap, 0, k)
	full := false
	thr := 0.0
	below := func(bound float64) bool { return full && bound < thr-pruneSlack*thr }
	ne := 0 // cs[:ne] are non-essential: together they cannot beat the threshold
	contribs := make([]float64, len(qs))
	for ne < len(cs) {
		d := uint32(math.MaxUint32)
		for i := ne; i < len(cs); i++ {
			d = min(d, cs[i].doc())
		}
		if d == math.MaxUint32 {
			break
		}
		clear(contribs)
		bound := 0.0
		for i := ne; i < len(cs); i++ {
			c := &cs[i]
			if c.doc() == d {
				v := contrib(c.w, ix.sat(c.tfs[c.pos], d))
				contribs[c.qi] = v
				bound += v
				c.pos++
			}
		}
		if ne > 0 {
			bound += prefix[ne-1]
		}
		skip := false
		for i := ne - 1; i >= 0; i-- {
			if below(bound) {
				skip = true
				break
			}
			c := &cs[i]
			c.seek(d)
			bound -= c.ub
			if c.doc() == d {
				v := contrib(c.w, ix.sat(c.tfs[c.pos], d))
				contribs[c.qi] = v
				bound += v
			}
		}
		if skip || below(bound) {
			continue
		}
		score := 0.0
		for _, v := range contribs {
			score += v
		}
		hit := Hit{Doc: int(d), Score: score}
		switch {
		case !full:
			heap.Push(&h, hit)
			full = len(h) == k
		case better(hit, h[0]):
			h[0] = hit
			heap.Fix(&h, 0)
		default:
			continue
		}
		if full {
			thr = h[0].Score
			for ne < len(cs) && prefix[ne] < thr-pruneSlack*thr {
				ne++
			}
		}
	}
	out := make([]Hit, len(h))
	for i := len(h) - 1; i >= 0; i-- {
		out[i] = heap.Pop(&h).(Hit)
	}
	return out
}

// forEachToken calls fn with each lowercase [a-z0-9]+ run of text (the plain
// analyzer, without allocating per token) and returns the token count. The
// slice passed to fn is reused.
func forEachToken(text string, fn func(tok []byte)) int {
	var buf [64]byte
	tok := buf[:0]
	n := 0
	for i := 0; i <= len(text); i++ {
		var c byte
		if i < len(text) {
			c = text[i]
		}
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			tok = append(tok, c)
			continue
		case c >= 'A' && c <= 'Z':
			tok = append(tok, c+'a'-'A')
			continue
		}
		if len(tok) > 0 {
			fn(tok)
			n++
			tok = tok[:0]
		}
	}
	return n
}
