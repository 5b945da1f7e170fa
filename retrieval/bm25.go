package retrieval

import (
	"encoding/binary"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"

	"github.com/himes-rl/himes/analysis"
)

// BM25Params are the Lucene BM25 parameters and the arithmetic they are
// scored with (Scoring: "" or ScoringExact, or ScoringLucene; see
// luceneStats).
type BM25Params struct {
	K1      float64 `json:"k1"`
	B       float64 `json:"b"`
	Scoring string  `json:"scoring,omitempty"`
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
// With Params.Scoring = ScoringLucene the index scores instead exactly as
// Lucene does for Pyserini's queries (float32, one-byte length norms,
// repeated query tokens weighted by their count, ties by ascending id): see
// luceneStats.
//
// An Index is immutable after building and safe for concurrent searches.
type Index struct {
	params   BM25Params
	analyzer analysis.Analyzer
	ids      []string
	docLen   []uint32
	avgdl    float64
	norm     []float64 // k1·(1 − b + b·|d|/avgdl), per document

	dict *termDict     // the vocabulary (nil on disk)
	post *postingLists // by ascending document number
	idf  []float64     // nil in memory under exact scoring: see termIDF
	// maxSat: max over t's postings of tf/(tf+norm[d]) (lucene: of
	// tfNorm), the MaxScore bound without weights; an index built in
	// memory that MaxScore does not search computes it only if asked
	// (maxSatBounds, tests), once.
	maxSat     []float64
	maxSatOnce sync.Once

	// Decoded postings with their saturated tf, for the dense search of
	// small indexes (nil otherwise): term t's are [impOff[t], impOff[t+1]),
	// posting j's document impDoc[j] (a small index has ≤ 65,536 documents)
	// and its tf/(tf + norm) satVal[impSat[j]]: the saturations are shared,
	// since they take only as many values as there are distinct pairs of
	// (tf, document length), so a posting costs 4 bytes instead of 12.
	impOff []uint32
	impDoc []uint16
	impSat []uint16
	satVal []float64

	luc *luceneStats // non-nil under ScoringLucene (the fields above then serve only IDF)
	// disk holds the ids, terms and texts of an on-disk index (nil in
	// memory); then ids and dict are unused.
	disk *diskData

	// scratch recycles per-query buffers (cursors hold two decoded blocks
	// each, ≈1 KiB): a rollout's search would otherwise allocate them anew.
	scratch sync.Pool
}

// searchScratch is the reusable state of one search.
type searchScratch struct {
	qs       []queryTerm
	pos      map[uint32]int // duplicate check for long queries only
	cs       []cursor       // MaxScore's cursors, one per query term
	dc       cursor         // the dense search's one cursor, term after term
	order    []*cursor
	prefix   []float64
	contribs []float64
	heap     []Hit
	acc      []float64 // dense accumulator, one per document, all zero between searches
	touched  []uint32
	seen     []uint64 // Lucene's dense search: documents touched, one bit each
}

func (ix *Index) getScratch() *searchScratch {
	if s, ok := ix.scratch.Get().(*searchScratch); ok {
		return s
	}
	return &searchScratch{}
}

// Hit is a document number and its score.
type Hit struct {
	Doc   int
	Score float64
}

// BuildIndex indexes texts (one per document) whose ids are strictly
// ascending, with the plain analyzer. The texts are not retained.
func BuildIndex(ids, texts []string, p BM25Params) (*Index, error) {
	return BuildIndexWith(ids, texts, p, analysis.Analyzer{})
}

// BuildIndexWith is BuildIndex with a chosen analyzer.
func BuildIndexWith(ids, texts []string, p BM25Params, an analysis.Analyzer) (*Index, error) {
	return buildIndex(ids, texts, p, an, nil)
}

// buildIndex is BuildIndexWith telling progress (when set) the documents
// indexed so far.
func buildIndex(ids, texts []string, p BM25Params, an analysis.Analyzer, progress BuildProgress) (*Index, error) {
	if len(ids) != len(texts) {
		return nil, fmt.Errorf("build index: %d ids but %d texts", len(ids), len(texts))
	}
	if len(ids) == 0 {
		return nil, fmt.Errorf("build index: no documents")
	}
	if p.K1 < 0 || p.B < 0 || p.B > 1 {
		return nil, fmt.Errorf("build index: need k1 ≥ 0 and b in [0,1], got k1=%v b=%v", p.K1, p.B)
	}
	if err := checkScoring(p.Scoring); err != nil {
		return nil, fmt.Errorf("build index: %w", err)
	}
	for i := 1; i < len(ids); i++ {
		if strings.Compare(ids[i-1], ids[i]) >= 0 {
			return nil, fmt.Errorf("build index: document ids must be strictly ascending: %q then %q", ids[i-1], ids[i])
		}
	}
	ix := &Index{params: p, analyzer: an, ids: slices.Clone(ids), docLen: make([]uint32, len(ids))}
	// the vocabulary while building: a map, then one compact dictionary
	terms := map[string]uint32{}
	var termStr []string
	// Analysis (the expensive part: tokenizing and vocabulary lookups) runs
	// in parallel over sub-ranges of a chunk of documents, each worker with
	// its own vocabulary; a sequential pass then maps worker terms to global
	// terms in document order (so numbering is first appearance, exactly as
	// a sequential build) and encodes the postings straight into the
	// compressed block format as each document completes.
	workers := max(1, min(runtime.GOMAXPROCS(0), 8))
	const chunkDocs = 8192
	ws := make([]analysisWorker, workers)
	for w := range ws {
		ws[w].an = an
	}
	// The analysis of chunk c+1 overlaps the sequential merge of chunk c.
	// Two sets of chunk buffers circulate between analysis and merge, so
	// building does not allocate (and leave garbage) per chunk.
	parts := make(chan []chunkPart, 1)
	free := make(chan []chunkPart, 2)
	free <- make([]chunkPart, workers)
	free <- make([]chunkPart, workers)
	go func() {
		defer close(parts)
		var wg sync.WaitGroup
		for start := 0; start < len(texts); start += chunkDocs {
			end := min(start+chunkDocs, len(texts))
			per := (end - start + workers - 1) / workers
			res := <-free
			for w := range ws {
				lo, hi := min(start+w*per, end), min(start+(w+1)*per, end)
				wg.Go(func() { ws[w].analyze(&res[w], texts, lo, hi, ix.docLen) })
			}
			wg.Wait()
			parts <- res
		}
	}()
	l2g := make([][]uint32, workers) // worker term → global term (+1; 0 = not yet mapped)
	var (
		tb    []termBuilder
		total uint64
		done  int
	)
	if progress != nil {
		progress("index", 0, len(texts))
	}
	for res := range parts {
		for w, part := range res {
			m := growTermMap(&l2g[w], len(part.strs))
			for k, d := range part.docs {
				pairs := part.pairs[part.docOff[k]:part.docOff[k+1]]
				for x := 0; x < len(pairs); x += 2 {
					g, added := internTerm(m, pairs[x], part.strs, terms, &termStr)
					if added {
						tb = append(tb, termBuilder{})
					}
					tb[g].add(uint32(d), pairs[x+1])
				}
				total += uint64(ix.docLen[d])
			}
		}
		free <- res
		if done = min(done+chunkDocs, len(texts)); progress != nil {
			progress("index", done, len(texts))
		}
	}
	ix.post = flattenPostings(tb)
	dict, err := newTermDict(termStr)
	if err != nil {
		return nil, fmt.Errorf("build index: %w", err)
	}
	ix.dict = dict
	ix.finish(total)
	return ix, nil
}

// growTermMap extends a worker's term map (worker term → global term + 1;
// 0 = not yet mapped) to cover its n terms, and returns it.
func growTermMap(m *[]uint32, n int) []uint32 {
	for len(*m) < n {
		*m = append(*m, 0)
	}
	return *m
}

// internTerm returns the global id of worker term lt, mapping it through m
// the first time: its string strs[lt] is looked up in (or added to) the
// global table ids/all. added reports a term new to the table.
func internTerm(m []uint32, lt uint32, strs []string, ids map[string]uint32, all *[]string) (g uint32, added bool) {
	if m[lt] != 0 {
		return m[lt] - 1, false
	}
	s := strs[lt]
	g, ok := ids[s]
	if !ok {
		g = uint32(len(*all))
		ids[s] = g
		*all = append(*all, s)
		added = true
	}
	m[lt] = g + 1
	return g, added
}

// analysisWorker tokenizes a range of documents into (worker term, tf)
// pairs with its own vocabulary, which persists across chunks.
type analysisWorker struct {
	an       analysis.Analyzer
	vocab    map[string]uint32 // raw token → worker term (dropToken for stopwords)
	termIDs  map[string]uint32 // analyzed term → worker term (several raw tokens may stem alike)
	strs     []string
	lastSeen []int32  // 1 + last document containing the worker term
	slot     []uint32 // its position in the current document's pairs
	tok      []byte
}

// dropToken marks raw tokens the analyzer removes (stopwords).
const dropToken = math.MaxUint32

// newToken analyzes a raw token seen for the first time by this worker
// (stemming runs once per distinct token, not per occurrence).
func (a *analysisWorker) newToken(raw string) uint32 {
	term, keep := a.an.Term(raw)
	if !keep {
		a.vocab[raw] = dropToken
		return dropToken
	}
	t, ok := a.termIDs[term]
	if !ok {
		t = uint32(len(a.strs))
		a.termIDs[term] = t
		a.strs = append(a.strs, term)
		a.lastSeen = append(a.lastSeen, 0)
		a.slot = append(a.slot, 0)
	}
	a.vocab[raw] = t
	return t
}

// chunkPart is one worker's analysis of a range of documents. strs is a
// snapshot of the worker's vocabulary: later appends never modify the
// elements it covers, so the merge may read it while the worker goes on.
type chunkPart struct {
	docs   []int    // documents of the range
	docOff []int    // pairs of docs[k] are pairs[docOff[k]:docOff[k+1]]
	pairs  []uint32 // worker term, tf, worker term, tf, …
	strs   []string
}

func (a *analysisWorker) analyze(p *chunkPart, texts []string, lo, hi int, docLen []uint32) {
	if a.vocab == nil {
		a.vocab, a.termIDs = map[string]uint32{}, map[string]uint32{}
	}
	p.docs, p.docOff, p.pairs = p.docs[:0], append(p.docOff[:0], 0), p.pairs[:0]
	if a.an.IsLucene() {
		a.analyzeLucene(p, texts, lo, hi, docLen)
		return
	}
	for d := lo; d < hi; d++ {
		text := texts[d]
		first := len(p.pairs)
		n := 0
		// the plain analyzer, inlined: this loop is the indexing hot path
		for i := 0; i <= len(text); i++ {
			var c byte
			if i < len(text) {
				c = text[i]
			}
			switch {
			case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
				a.tok = append(a.tok, c)
				continue
			case c >= 'A' && c <= 'Z':
				a.tok = append(a.tok, c+'a'-'A')
				continue
			}
			if len(a.tok) == 0 {
				continue
			}
			if a.count(p, d, first, a.tok) {
				n++
			}
			a.tok = a.tok[:0]
		}
		a.endDoc(p, d, n, docLen)
	}
	p.strs = a.strs
}

// analyzeLucene is analyze for the lucene-english analyzer: the same
// accounting over StandardTokenizer tokens.
func (a *analysisWorker) analyzeLucene(p *chunkPart, texts []string, lo, hi int, docLen []uint32) {
	for d := lo; d < hi; d++ {
		first := len(p.pairs)
		n := 0
		analysis.ForEachLuceneToken(texts[d], func(tok []byte) {
			if a.count(p, d, first, tok) {
				n++
			}
		})
		a.endDoc(p, d, n, docLen)
	}
	p.strs = a.strs
}

// count adds one token of document d (whose pairs start at first) to the
// part and reports whether it counts towards the document's length (a
// stopword, dropToken, does not). Both analyzers' loops end here.
func (a *analysisWorker) count(p *chunkPart, d, first int, tok []byte) bool {
	t, ok := a.vocab[string(tok)]
	if !ok {
		t = a.newToken(string(tok))
	}
	if t == dropToken {
		return false
	}
	if a.lastSeen[t] != int32(d+1) {
		a.lastSeen[t] = int32(d + 1)
		a.slot[t] = uint32(len(p.pairs) - first)
		p.pairs = append(p.pairs, t, 1)
	} else {
		p.pairs[first+int(a.slot[t])+1]++
	}
	return true
}

// endDoc closes document d of n counted tokens.
func (a *analysisWorker) endDoc(p *chunkPart, d, n int, docLen []uint32) {
	docLen[d] = uint32(n)
	p.docs = append(p.docs, d)
	p.docOff = append(p.docOff, len(p.pairs))
}

// termBuilder accumulates one term's compressed postings during a build.
type termBuilder struct {
	buf       []byte
	blockOff  []uint32 // offsets into buf
	blockLast []uint32
	last, n   uint32
}

func (b *termBuilder) add(doc, tf uint32) {
	if b.n%blockSize == 0 {
		b.blockOff = append(b.blockOff, uint32(len(b.buf)))
	}
	b.buf = binary.AppendUvarint(b.buf, uint64(doc-b.last)) // the first posting's gap is the document itself
	b.buf = binary.AppendUvarint(b.buf, uint64(tf))
	b.last = doc
	b.n++
	if b.n%blockSize == 0 {
		b.blockLast = append(b.blockLast, doc)
	}
}

// flattenPostings concatenates the terms' buffers into one postingLists,
// releasing each builder as it goes.
func flattenPostings(tb []termBuilder) *postingLists {
	size, blocks := 0, 0
	for i := range tb {
		size += len(tb[i].buf)
		blocks += len(tb[i].blockOff)
	}
	// exact sizes: appending would leave up to a quarter spare
	p := &postingLists{
		data:      make([]byte, 0, size),
		blockOff:  make([]uint64, 0, blocks),
		blockLast: make([]uint32, 0, blocks),
		termBlk:   make([]uint32, 1, len(tb)+1),
		df:        make([]uint32, 0, len(tb)),
	}
	for i := range tb {
		b := &tb[i]
		if b.n%blockSize != 0 {
			b.blockLast = append(b.blockLast, b.last)
		}
		base := uint64(len(p.data))
		for _, o := range b.blockOff {
			p.blockOff = append(p.blockOff, base+uint64(o))
		}
		p.blockLast = append(p.blockLast, b.blockLast...)
		p.data = append(p.data, b.buf...)
		p.termBlk = append(p.termBlk, uint32(len(p.blockLast)))
		p.df = append(p.df, b.n)
		*b = termBuilder{}
	}
	return p
}

// finish derives the statistics that are not persisted.
func (ix *Index) finish(totalLen uint64) {
	n := len(ix.ids)
	ix.avgdl = float64(totalLen) / float64(n)
	if ix.avgdl == 0 {
		ix.avgdl = 1 // every document empty: lengths cannot matter
	}
	if normScoring(ix.params.Scoring) == ScoringLucene {
		ix.luc = newLuceneStats(ix, totalLen)
		ix.maxSat = luceneMaxTFNorm(ix)
		return
	}
	ix.norm = make([]float64, n)
	for d, l := range ix.docLen {
		ix.norm[d] = ix.params.K1 * (1 - ix.params.B + ix.params.B*float64(l)/ix.avgdl)
	}
	// idf is computed from df when a query needs it (termIDF); the MaxScore
	// bounds only for an index that MaxScore searches (maxSatBounds).
	if n > denseMaxDocs {
		ix.maxSatBounds()
	} else if np := ix.post.numPostings(); np <= maxImpacts {
		ix.buildImpacts(np)
	}
}

// buildImpacts decodes the np postings into impOff, impDoc, impSat and
// satVal, unless there are more than 65,536 distinct saturations.
func (ix *Index) buildImpacts(np int) {
	nt := len(ix.post.df)
	ix.impOff, ix.impDoc, ix.impSat = make([]uint32, 0, nt+1), make([]uint16, 0, np), make([]uint16, 0, np)
	// The same (tf, document length) has the same norm, hence the same
	// saturation. Lengths are numbered (class), and the saturation index
	// + 1 of a small tf is looked up in a dense table, of a larger one in
	// a map.
	const denseTF = 16
	classOf := map[uint32]uint32{}
	class := make([]uint32, len(ix.docLen))
	for d, l := range ix.docLen {
		c, ok := classOf[l]
		if !ok {
			c = uint32(len(classOf))
			classOf[l] = c
		}
		class[d] = c
	}
	nc := uint32(len(classOf))
	small := make([]uint32, denseTF*nc)
	large := map[uint64]uint32{}
	var c cursor
	for t := range nt {
		ix.impOff = append(ix.impOff, uint32(len(ix.impDoc)))
		for c.init(ix.post, uint32(t)); c.doc() != math.MaxUint32; c.next() {
			tf, d := c.tf(), c.doc()
			var v uint32
			if tf <= denseTF {
				v = small[(tf-1)*nc+class[d]]
			} else {
				v = large[uint64(tf)<<32|uint64(class[d])]
			}
			if v == 0 {
				if len(ix.satVal) > math.MaxUint16 {
					ix.impOff, ix.impDoc, ix.impSat, ix.satVal = nil, nil, nil, nil // search the blocks
					return
				}
				ix.satVal = append(ix.satVal, ix.sat(tf, d))
				v = uint32(len(ix.satVal))
				if tf <= denseTF {
					small[(tf-1)*nc+class[d]] = v
				} else {
					large[uint64(tf)<<32|uint64(class[d])] = v
				}
			}
			ix.impDoc, ix.impSat = append(ix.impDoc, uint16(d)), append(ix.impSat, uint16(v-1))
		}
	}
	ix.impOff = append(ix.impOff, uint32(len(ix.impDoc)))
	ix.satVal = slices.Clip(ix.satVal)
}

// maxSatBounds returns maxSat, computing it the first time on an index
// built in memory (under ScoringLucene, and on disk, it is always there).
func (ix *Index) maxSatBounds() []float64 {
	ix.maxSatOnce.Do(func() {
		if ix.maxSat != nil {
			return
		}
		m := make([]float64, len(ix.post.df))
		var c cursor
		for t := range m {
			for c.init(ix.post, uint32(t)); c.doc() != math.MaxUint32; c.next() {
				m[t] = max(m[t], ix.sat(c.tf(), c.doc()))
			}
		}
		ix.maxSat = m
	})
	return ix.maxSat
}

// termIDF is term t's idf: the stored one (on disk, and Lucene's float
// one under ScoringLucene), else computed from its df.
func (ix *Index) termIDF(t uint32) float64 {
	if ix.idf != nil {
		return ix.idf[t]
	}
	df := float64(ix.post.df[t])
	return math.Log(1 + (float64(ix.Len())-df+0.5)/(df+0.5))
}

// maxImpacts bounds the decoded postings kept for the dense search (4
// bytes each, at most 8 MiB): decoding and dividing at query time cost
// about half of a search on the demo KB.
const maxImpacts = 1 << 21

// sat is the saturated term frequency tf/(tf + norm). The explicit float64
// conversions forbid fused multiply-adds, so the pruned and exhaustive
// searches compute bit-identical scores.
func (ix *Index) sat(tf, doc uint32) float64 {
	f := float64(tf)
	return float64(f / float64(f+ix.norm[doc]))
}

// Len is the number of documents.
func (ix *Index) Len() int {
	if ix.disk != nil {
		return ix.disk.n
	}
	return len(ix.ids)
}

// ID is the id of document d.
func (ix *Index) ID(d int) string {
	if ix.disk != nil {
		return ix.disk.id(d)
	}
	return ix.ids[d]
}

// termID looks an analyzed term up in the vocabulary.
func (ix *Index) termID(s string) (uint32, bool) {
	if ix.disk != nil {
		return ix.disk.lookup(s)
	}
	return ix.dict.lookup(s)
}

// NumTerms is the vocabulary size.
func (ix *Index) NumTerms() int { return len(ix.post.df) }

// NumPostings is the total number of (term, document) pairs.
func (ix *Index) NumPostings() int { return ix.post.numPostings() }

// PostingBytes is the memory held by the compressed posting lists.
func (ix *Index) PostingBytes() int { return ix.post.bytes() }

// Analyzer is the analysis the index was built with; queries must use it.
func (ix *Index) Analyzer() analysis.Analyzer { return ix.analyzer }

// Params returns k1 and b.
func (ix *Index) Params() BM25Params { return ix.params }

// AvgDocLen is the mean document length in tokens.
func (ix *Index) AvgDocLen() float64 { return ix.avgdl }

// IDF is the BM25 idf of an analyzed term (Lucene's float one under
// ScoringLucene), 0 for a term not in the index.
func (ix *Index) IDF(term string) float64 {
	t, ok := ix.termID(term)
	if !ok {
		return 0
	}
	return ix.termIDF(t)
}

// DF is the number of documents containing an analyzed term.
func (ix *Index) DF(term string) int {
	t, ok := ix.termID(term)
	if !ok {
		return 0
	}
	return int(ix.post.df[t])
}

// queryTerm is one distinct known query term with its weight idf.
type queryTerm struct {
	t uint32
	w float64
}

// prepare drops repeated and unknown query tokens, keeping the order of
// first appearance: that order is the canonical summation order of scores.
// The terms are appended to qs[:0]; pos (allocated on demand) serves long
// queries, short ones check duplicates by scanning.
func (ix *Index) prepare(tokens []string, qs []queryTerm, pos *map[uint32]int) []queryTerm {
	qs = qs[:0]
	for _, tok := range tokens {
		t, ok := ix.termID(tok)
		if !ok {
			continue
		}
		qs = ix.addTerm(qs, pos, t)
	}
	return qs
}

// longQuery is the number of distinct terms above which duplicates are
// found with a map rather than by scanning.
const longQuery = 32

func (ix *Index) addTerm(qs []queryTerm, pos *map[uint32]int, t uint32) []queryTerm {
	if len(qs) < longQuery {
		for _, q := range qs {
			if q.t == t {
				return qs
			}
		}
	} else {
		if *pos == nil {
			*pos = map[uint32]int{}
		}
		if len(*pos) == 0 {
			for i, q := range qs {
				(*pos)[q.t] = i
			}
		}
		if _, seen := (*pos)[t]; seen {
			return qs
		}
		(*pos)[t] = len(qs)
	}
	return append(qs, queryTerm{t: t, w: ix.termIDF(t)})
}

// contrib is one term's score contribution.
func contrib(w, sat float64) float64 { return float64(w * sat) }

// SearchExhaustive is the straightforward reference: score every document
// containing a query term (term at a time, summing in canonical order), sort
// all of them, keep k.
func (ix *Index) SearchExhaustive(tokens []string, k int) []Hit {
	if ix.luc != nil {
		return ix.searchLuceneExhaustive(tokens, k)
	}
	var pos map[uint32]int
	qs := ix.prepare(tokens, nil, &pos)
	acc := map[uint32]float64{}
	var c cursor
	for _, q := range qs {
		for c.init(ix.post, q.t); c.doc() != math.MaxUint32; c.next() {
			acc[c.doc()] += contrib(q.w, ix.sat(c.tf(), c.doc()))
		}
	}
	hits := make([]Hit, 0, len(acc))
	for d, s := range acc {
		hits = append(hits, Hit{Doc: int(d), Score: s})
	}
	slices.SortFunc(hits, scoreDocDesc.compare)
	if len(hits) > k {
		hits = hits[:k]
	}
	return hits
}

// pruneSlack keeps pruning conservative against rounding: upper bounds are
// summed in a different order than scores, so a bound must fall short of the
// threshold by more than float noise before a document is skipped.
const pruneSlack = 1e-9

// Search returns the top k documents for analyzed query tokens, best first:
// on small collections term at a time into a dense accumulator, otherwise
// document-at-a-time MaxScore over a size-k heap. It returns exactly
// what SearchExhaustive returns (same documents, same order, bit-identical
// scores).
func (ix *Index) Search(tokens []string, k int) []Hit {
	if k <= 0 {
		return nil
	}
	if ix.luc != nil {
		return ix.searchLucene(tokens, k, ix.Len() <= denseMaxDocs)
	}
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	sc.qs = ix.prepare(tokens, sc.qs, &sc.pos)
	clear(sc.pos)
	return ix.searchWith(sc, k, ix.Len() <= denseMaxDocs)
}

// SearchText is Search for the analyzed tokens of text. With the plain
// analyzer it looks tokens up as they are cut from text, allocating no
// token strings.
func (ix *Index) SearchText(text string, k int) []Hit {
	if k <= 0 {
		return nil
	}
	if !ix.analyzer.IsPlain() || ix.luc != nil {
		return ix.Search(ix.analyzer.Tokenize(text), k)
	}
	sc := ix.getScratch()
	defer ix.scratch.Put(sc)
	sc.qs = sc.qs[:0]
	analysis.ForEachPlainToken(text, func(tok []byte) {
		if t, ok := ix.termID(string(tok)); ok {
			sc.qs = ix.addTerm(sc.qs, &sc.pos, t)
		}
	})
	clear(sc.pos)
	return ix.searchWith(sc, k, ix.Len() <= denseMaxDocs)
}

// denseMaxDocs is the largest collection searched term at a time into a
// dense accumulator rather than by MaxScore. Decoding every posting of the
// query terms costs less than MaxScore's per-document merging and seeking
// as long as the accumulator is small: measured with 20-term top-20 queries
// (BenchmarkSearchDemoLong, Zipf corpora) dense is 3.1x faster on 1,951
// documents, 2.3x on 20k and still 1.6x on 100k; the bound keeps the
// accumulator, one per concurrent search, at 512 KiB.
const denseMaxDocs = 1 << 16

// searchWith runs the prepared query sc.qs with the chosen strategy (the
// dense one from the decoded impacts when the index keeps them); all return
// exactly SearchExhaustive's hits.
func (ix *Index) searchWith(sc *searchScratch, k int, dense bool) []Hit {
	if len(sc.qs) == 0 {
		return nil
	}
	if dense {
		return ix.searchDense(sc, k, ix.impOff != nil)
	}
	return ix.search(sc, k)
}

// maxScoreCursors opens one cursor per query term (term i's id, weight
// and score bound from term) in sc, ordered by bound ascending, with the
// prefix sums of the bounds (prefix[i] = Σ_{j≤i} ub_j): maxScore's set-up.
func (ix *Index) maxScoreCursors(sc *searchScratch, n int, term func(i int) (t uint32, w, ub float64)) ([]*cursor, []float64) {
	if cap(sc.cs) < n {
		sc.cs = make([]cursor, n)
		sc.order = make([]*cursor, n)
		sc.prefix = make([]float64, n)
		sc.contribs = make([]float64, n)
	}
	cs := sc.order[:n]
	for i := range n {
		c := &sc.cs[i]
		t, w, ub := term(i)
		c.w, c.ub, c.qi = w, ub, i
		c.init(ix.post, t)
		cs[i] = c
	}
	slices.SortStableFunc(cs, func(a, b *cursor) int {
		switch {
		case a.ub < b.ub:
			return -1
		case a.ub > b.ub:
			return 1
		}
		return 0
	})
	prefix := sc.prefix[:n]
	sum := 0.0
	for i := range cs {
		sum += cs[i].ub
		prefix[i] = sum
	}
	return cs, prefix
}

// search runs MaxScore for the prepared terms sc.qs.
func (ix *Index) search(sc *searchScratch, k int) []Hit {
	qs := sc.qs
	var top topK
	top.reset(scoreDocDesc, k, sc.heap)
	maxSat := ix.maxSatBounds()
	ix.maxScore(sc, &top, len(qs), func(i int) (uint32, float64, float64) {
		return qs[i].t, qs[i].w, contrib(qs[i].w, maxSat[qs[i].t])
	})
	var out []Hit
	out, sc.heap = top.sorted()
	return out
}

// maxScore is the one document-at-a-time MaxScore loop of both scorings,
// filling top (whose order breaks ties: scoreDocDesc, or scoreDocAsc under
// Lucene). Term i's id, weight and score bound come from term. A document
// is scored whole, its clauses summed in query order as the exhaustive
// references sum them (under Lucene the sum is then rounded to float32, as
// Lucene's float score), and skipped only when its bound falls short of the
// k-th score by more than rounding (pruneSlack). Documents come in
// ascending order, so under either tie order a document that could only
// tie the k-th score is decided by accepts, never by pruning.
//
// A clause is scored by the float64 formula (contrib) or, under Lucene, by
// Lucene's float32 arithmetic widened (luceneStats.score). The branch on luc
// is the same for every posting of a search, so it is predicted; both arms
// are written out where a clause is scored because a method holding the
// branch is too large to inline, and a call per posting costs more.
func (ix *Index) maxScore(sc *searchScratch, top *topK, n int, term func(i int) (t uint32, w, ub float64)) {
	luc := ix.luc
	cs, prefix := ix.maxScoreCursors(sc, n, term)
	full := false
	thr := 0.0
	below := func(bound float64) bool { return full && bound < thr-pruneSlack*thr }
	ne := 0 // cs[:ne] are non-essential: together they cannot beat the threshold
	contribs := sc.contribs[:n]
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
		for _, c := range cs[ne:] {
			if c.doc() == d {
				var v float64
				if luc != nil {
					v = float64(luc.score(float32(c.w), c.tf(), d))
				} else {
					v = contrib(c.w, ix.sat(c.tf(), d))
				}
				contribs[c.qi] = v
				bound += v
				c.next()
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
			c := cs[i]
			c.seek(d)
			bound -= c.ub
			if c.doc() == d {
				var v float64
				if luc != nil {
					v = float64(luc.score(float32(c.w), c.tf(), d))
				} else {
					v = contrib(c.w, ix.sat(c.tf(), d))
				}
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
		if luc != nil {
			score = float64(float32(score))
		}
		hit := Hit{Doc: int(d), Score: score}
		if !top.accepts(hit) {
			continue
		}
		top.push(hit)
		if full = top.full(); full {
			thr = top.worst().Score
			for ne < len(cs) && prefix[ne] < thr-pruneSlack*thr {
				ne++
			}
		}
	}
}

// searchDense scores term at a time into a dense accumulator (canonical
// summation order, as SearchExhaustive), then selects the top k.
func (ix *Index) searchDense(sc *searchScratch, k int, impacts bool) []Hit {
	if len(sc.acc) != ix.Len() {
		sc.acc = make([]float64, ix.Len())
	}
	acc, touched := sc.acc, sc.touched[:0]
	c := &sc.dc
	for _, q := range sc.qs {
		if impacts {
			lo, hi := ix.impOff[q.t], ix.impOff[q.t+1]
			sats, vals := ix.impSat[lo:hi], ix.satVal
			for j, d := range ix.impDoc[lo:hi] {
				if acc[d] == 0 {
					touched = append(touched, uint32(d))
				}
				acc[d] += contrib(q.w, vals[sats[j]])
			}
			continue
		}
		for b := int(ix.post.termBlk[q.t]); b < int(ix.post.termBlk[q.t+1]); b++ {
			_ = c.decode(ix.post, q.t, b, 0) // validated when built or loaded
			for j, d := range c.docs[:c.n] {
				// every contribution is > 0, so 0 marks an untouched document
				if acc[d] == 0 {
					touched = append(touched, d)
				}
				acc[d] += contrib(q.w, ix.sat(c.tfs[j], d))
			}
		}
	}
	var top topK
	top.reset(scoreDocDesc, k, sc.heap)
	for _, d := range touched {
		if hit := (Hit{Doc: int(d), Score: acc[d]}); top.accepts(hit) {
			top.push(hit)
		}
		acc[d] = 0
	}
	sc.touched = touched
	var out []Hit
	out, sc.heap = top.sorted()
	return out
}
