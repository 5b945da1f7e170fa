package retrieval

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Pipeline is the retrieval pipeline of a run: knowledge-base chunks, the
// BM25 index, optionally an embedder and dense index, and optionally
// long-term memory. It implements Retriever and is safe for concurrent use.
type Pipeline struct {
	cfg      Config
	kb       *KB
	chunks   []Chunk // sorted by id: position = document number
	chunkPos map[string]int
	bm25     *Index
	analyzer Analyzer
	emb      Embedder    // nil when neither dense search nor memory needs one
	dense    *DenseIndex // nil unless method is dense or hybrid
	mem      atomic.Pointer[MemoryStore]
	// chunkVecs caches E(c) per chunk for memory re-ranking when there is no
	// dense index: rollouts retrieve the same chunks over and over.
	chunkVecs []atomic.Pointer[[]float32]
}

// Open builds the retrieval pipeline from config: loads the KB (JSONL or
// Parquet {id,title,text}), chunks it, loads cfg.Index if set (verifying it
// matches the KB, the chunking, k1/b and the format version) or builds BM25
// in memory, sets up the embedder and dense index when cfg.Method needs
// them, and long-term memory when cfg.Memory.Enabled (from
// cfg.Memory.Partitions if set, else empty until SetMemory).
func Open(ctx context.Context, cfg Config, kbPath string) (*Pipeline, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("retrieval config: %w", err)
	}
	start := time.Now()
	kb, err := LoadKB(ctx, kbPath)
	if err != nil {
		return nil, err
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		return nil, err
	}
	p := &Pipeline{cfg: cfg, kb: kb, chunks: chunks, chunkPos: make(map[string]int, len(chunks)),
		chunkVecs: make([]atomic.Pointer[[]float32], len(chunks))}
	for i, c := range chunks {
		p.chunkPos[c.ID] = i
	}
	if cfg.Index != "" {
		ix, meta, err := LoadIndex(ctx, cfg.Index)
		if err != nil {
			return nil, err
		}
		if err := checkIndexMatches(meta, ix, kb, chunks, cfg); err != nil {
			return nil, fmt.Errorf("index %s: %w", cfg.Index, err)
		}
		p.bm25 = ix
	} else {
		an, err := NewAnalyzer(cfg.Analyzer)
		if err != nil {
			return nil, err
		}
		ids, texts := chunkTexts(chunks)
		if p.bm25, err = BuildIndexWith(ids, texts, BM25Params{K1: cfg.K1, B: cfg.B, Scoring: cfg.Scoring}, an); err != nil {
			return nil, err
		}
	}
	p.analyzer = p.bm25.Analyzer()
	slog.Info("retrieval: BM25 ready", "kb", kbPath, "passages", len(kb.Passages), "chunks", len(chunks),
		"terms", p.bm25.NumTerms(), "persisted", cfg.Index != "", "elapsed_s", time.Since(start).Round(time.Millisecond).Seconds())
	if cfg.Method != "bm25" || cfg.Memory.Enabled {
		if p.emb, err = NewEmbedder(cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Method != "bm25" {
		_, texts := chunkTexts(chunks)
		if p.dense, err = EmbedDocs(ctx, p.emb, texts, max(cfg.EmbedBatch, 256)); err != nil {
			return nil, err
		}
		slog.Info("retrieval: dense index ready", "embedder", p.emb.Name(), "dim", p.dense.Dim())
	}
	if cfg.Memory.Enabled && cfg.Memory.Partitions != "" {
		m, err := LoadMemory(ctx, cfg.Memory.Partitions, cfg.Memory, p.emb)
		if err != nil {
			return nil, err
		}
		p.mem.Store(m)
		slog.Info("retrieval: long-term memory loaded", "file", cfg.Memory.Partitions, "memories", m.Len())
	}
	return p, nil
}

// sortedChunks chunks the KB and orders chunks by id, the document order of
// every index.
func sortedChunks(kb *KB, cfg Config) ([]Chunk, error) {
	chunks, err := ChunkPassages(kb.Passages, cfg.ChunkWords, cfg.ChunkStride)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(chunks, func(a, b Chunk) int { return strings.Compare(a.ID, b.ID) })
	return chunks, nil
}

// BuildIndexDir builds the BM25 index of a knowledge base with cfg's k1, b
// and chunking and persists it in dir (what `himes index build` does).
func BuildIndexDir(ctx context.Context, cfg Config, kbPath, dir string) (IndexMeta, error) {
	kb, err := LoadKB(ctx, kbPath)
	if err != nil {
		return IndexMeta{}, err
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		return IndexMeta{}, err
	}
	an, err := NewAnalyzer(cfg.Analyzer)
	if err != nil {
		return IndexMeta{}, err
	}
	ids, texts := chunkTexts(chunks)
	ix, err := BuildIndexWith(ids, texts, BM25Params{K1: cfg.K1, B: cfg.B, Scoring: cfg.Scoring}, an)
	if err != nil {
		return IndexMeta{}, err
	}
	abs, err := filepath.Abs(kbPath)
	if err != nil {
		abs = kbPath
	}
	meta := IndexMeta{KBPath: abs, KBFingerprint: kb.Fingerprint, ChunkWords: cfg.ChunkWords,
		ChunkStride: cfg.ChunkStride, Built: time.Now().UTC().Truncate(time.Second)}
	if err := SaveIndex(ctx, dir, ix, meta); err != nil {
		return IndexMeta{}, err
	}
	return ReadIndexMeta(dir)
}

func chunkTexts(chunks []Chunk) (ids, texts []string) {
	ids = make([]string, len(chunks))
	texts = make([]string, len(chunks))
	for i, c := range chunks {
		ids[i], texts[i] = c.ID, indexText(c)
	}
	return ids, texts
}

// checkIndexMatches refuses a persisted index built from another KB, with
// other chunking or other BM25 parameters.
func checkIndexMatches(meta IndexMeta, ix *Index, kb *KB, chunks []Chunk, cfg Config) error {
	if meta.KBFingerprint != kb.Fingerprint {
		return fmt.Errorf("stale: built from a knowledge base with SHA-256 %.12s…, %s has %.12s…: rebuild with `himes index build`",
			meta.KBFingerprint, kb.Path, kb.Fingerprint)
	}
	if meta.ChunkWords != cfg.ChunkWords || meta.ChunkStride != cfg.ChunkStride {
		return fmt.Errorf("built with chunk_words=%d chunk_stride=%d, config says %d/%d",
			meta.ChunkWords, meta.ChunkStride, cfg.ChunkWords, cfg.ChunkStride)
	}
	if an, _ := NewAnalyzer(cfg.Analyzer); an.ID() != meta.Analyzer {
		return fmt.Errorf("built with analyzer %q, config says %q (%s)", meta.Analyzer, cfg.Analyzer, an.ID())
	}
	if meta.Params.K1 != cfg.K1 || meta.Params.B != cfg.B {
		return fmt.Errorf("built with k1=%v b=%v, config says k1=%v b=%v", meta.Params.K1, meta.Params.B, cfg.K1, cfg.B)
	}
	if got := normScoring(meta.Params.Scoring); got != normScoring(cfg.Scoring) {
		return fmt.Errorf("built for scoring %q, config says %q: rebuild with `himes index build`", got, normScoring(cfg.Scoring))
	}
	if ix.Len() != len(chunks) {
		return fmt.Errorf("has %d documents, the knowledge base gives %d chunks", ix.Len(), len(chunks))
	}
	for i, c := range chunks {
		if ix.ID(i) != c.ID {
			return fmt.Errorf("document %d is %q, the knowledge base gives %q", i, ix.ID(i), c.ID)
		}
	}
	return nil
}

// NewEmbedder builds the embedder cfg.Embedder names.
func NewEmbedder(cfg Config) (Embedder, error) {
	switch cfg.Embedder {
	case "hash":
		return NewHashEmbedder(cfg.HashDim)
	case "ollama":
		cache := cfg.EmbedCache
		switch cache {
		case "off":
			cache = ""
		case "":
			dir, err := os.UserCacheDir()
			if err != nil {
				return nil, fmt.Errorf("embed cache: %w (set retrieval.embed_cache)", err)
			}
			cache = filepath.Join(dir, "himes", "embed")
		}
		return NewOllamaEmbedder(cfg.OllamaURL, cfg.EmbedModel, cfg.EmbedBatch, cache)
	default:
		return nil, fmt.Errorf("embedder %q: want hash or ollama", cfg.Embedder)
	}
}

// Config returns the pipeline's configuration.
func (p *Pipeline) Config() Config { return p.cfg }

// KB returns the loaded knowledge base.
func (p *Pipeline) KB() *KB { return p.kb }

// Index returns the BM25 index.
func (p *Pipeline) Index() *Index { return p.bm25 }

// Chunks returns all chunks in document order (callers must not modify them).
func (p *Pipeline) Chunks() []Chunk { return p.chunks }

// Chunk returns the chunk with the given id.
func (p *Pipeline) Chunk(id string) (Chunk, bool) {
	i, ok := p.chunkPos[id]
	if !ok {
		return Chunk{}, false
	}
	return p.chunks[i], true
}

// PassageOf returns the passage id of a chunk id ("" if unknown).
func (p *Pipeline) PassageOf(chunkID string) string {
	if i, ok := p.chunkPos[chunkID]; ok {
		return p.chunks[i].PassageID
	}
	return ""
}

// IDF is the BM25 (Lucene) idf of a term in the KB after the index's
// analysis, 0 for unknown terms.
func (p *Pipeline) IDF(term string) float64 { return p.bm25.IDF(term) }

// Tokenize is the index's analyzer.
func (p *Pipeline) Tokenize(text string) []string { return p.analyzer.Tokenize(text) }

// Embedder returns the pipeline's embedder, creating it from the config if
// no stage needed one yet (so memories can be built in the same space).
func (p *Pipeline) Embedder() (Embedder, error) {
	if p.emb != nil {
		return p.emb, nil
	}
	return NewEmbedder(p.cfg)
}

// SetMemory attaches a long-term memory store (built by `himes memory
// build`, LoadMemory or BuildMemory). Its embedder must be the pipeline's
// (same name), since chunk and memory vectors are compared. Memory is used
// by Retrieve only when cfg.Memory.Enabled.
func (p *Pipeline) SetMemory(m *MemoryStore) error {
	if m != nil && p.emb != nil && m.emb.Name() != p.emb.Name() {
		return fmt.Errorf("set memory: memories embedded with %s, pipeline embeds with %s", m.emb.Name(), p.emb.Name())
	}
	if m != nil && p.emb == nil && p.cfg.Memory.Enabled {
		// cannot happen through Open (memory on creates the embedder); the
		// chunk-vector cache must never mix embedding spaces
		return fmt.Errorf("set memory: pipeline has no embedder")
	}
	p.mem.Store(m)
	return nil
}

// Memory returns the attached memory store (nil if none).
func (p *Pipeline) Memory() *MemoryStore { return p.mem.Load() }

// Search is the first stage alone: the top k chunks for text by the
// configured method (bm25, dense, or hybrid by RRF of the two).
func (p *Pipeline) Search(ctx context.Context, text string, k int) ([]Ranked, error) {
	var hits []Hit
	switch p.cfg.Method {
	case "bm25":
		hits = p.bm25.SearchText(text, k)
	case "dense", "hybrid":
		vs, err := p.emb.Embed(ctx, []string{text})
		if err != nil {
			return nil, fmt.Errorf("embed query: %w", err)
		}
		dh, err := p.dense.Search(vs[0], k)
		if err != nil {
			return nil, err
		}
		hits = dh
		if p.cfg.Method == "hybrid" {
			hits = RRF(p.cfg.RRFK, p.bm25.SearchText(text, k), dh)
			hits = hits[:min(k, len(hits))]
		}
	}
	out := make([]Ranked, len(hits))
	for i, h := range hits {
		out[i] = Ranked{Chunk: p.chunks[h.Doc], Score: h.Score}
	}
	return out, nil
}

// Retrieve retrieves cfg.Candidates chunks for the rewrite (the query when
// the rewrite is empty), activates long-term memory with the user's original
// query, re-ranks by mean cosine with the activated memories, and returns
// the top cfg.TopK with a trace. With memory off, or nothing activated, the
// final ranking is the retrieval order.
func (p *Pipeline) Retrieve(ctx context.Context, user, rewrite, query string) (Result, error) {
	return p.RetrieveAt(ctx, user, rewrite, query, time.Time{})
}

// RetrieveAt is Retrieve with long-term memory restricted to memories
// strictly older than at (zero: all), so that evaluation over a user's own
// conversations does not activate queries the user asks later.
func (p *Pipeline) RetrieveAt(ctx context.Context, user, rewrite, query string, at time.Time) (Result, error) {
	text := rewrite
	if strings.TrimSpace(text) == "" {
		text = query
	}
	cands, err := p.Search(ctx, text, p.cfg.Candidates)
	if err != nil {
		return Result{}, fmt.Errorf("retrieve: %w", err)
	}
	var res Result
	res.Trace.Candidates = make([]Scored, len(cands))
	for i, c := range cands {
		res.Trace.Candidates[i] = Scored{ID: c.ID, Score: c.Score}
	}
	final := cands
	if m := p.mem.Load(); m != nil && p.cfg.Memory.Enabled && len(cands) > 0 && strings.TrimSpace(query) != "" {
		qv, err := m.emb.Embed(ctx, []string{query})
		if err != nil {
			return Result{}, fmt.Errorf("retrieve: embed query for memory: %w", err)
		}
		mems, memVecs, err := m.ActivateBefore(ctx, user, query, qv[0], at)
		if err != nil {
			return Result{}, fmt.Errorf("retrieve: %w", err)
		}
		res.Trace.Memories = mems
		if len(mems) > 0 {
			candVecs, err := p.candidateVectors(ctx, m.emb, cands)
			if err != nil {
				return Result{}, fmt.Errorf("retrieve: %w", err)
			}
			if final, err = Rerank(cands, candVecs, memVecs, p.cfg.Memory.RetrievalWeight); err != nil {
				return Result{}, fmt.Errorf("retrieve: %w", err)
			}
		}
	}
	res.Chunks = final[:min(p.cfg.TopK, len(final))]
	res.Trace.Final = make([]Scored, len(res.Chunks))
	for i, c := range res.Chunks {
		res.Trace.Final[i] = Scored{ID: c.ID, Score: c.Score}
	}
	return res, nil
}

// candidateVectors returns E(c) for candidates: from the dense index when
// there is one in the same space, else embedded now.
func (p *Pipeline) candidateVectors(ctx context.Context, emb Embedder, cands []Ranked) ([][]float32, error) {
	out := make([][]float32, len(cands))
	if p.dense != nil && p.dense.name == emb.Name() {
		for i, c := range cands {
			out[i] = p.dense.Vector(p.chunkPos[c.ID])
		}
		return out, nil
	}
	var missing []int
	for i, c := range cands {
		if v := p.chunkVecs[p.chunkPos[c.ID]].Load(); v != nil {
			out[i] = *v
		} else {
			missing = append(missing, i)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	texts := make([]string, len(missing))
	for j, i := range missing {
		texts[j] = indexText(cands[i].Chunk)
	}
	vs, err := emb.Embed(ctx, texts)
	if err != nil {
		return nil, fmt.Errorf("embed candidates: %w", err)
	}
	for j, i := range missing {
		out[i] = vs[j]
		p.chunkVecs[p.chunkPos[cands[i].ID]].Store(&vs[j])
	}
	return out, nil
}

var _ Retriever = (*Pipeline)(nil)
