package retrieval

import (
	"context"
	"errors"
	"fmt"
	"github.com/himes-rl/himes/internal/progress"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"

	"golang.org/x/sync/errgroup"
)

// Pipeline is the retrieval pipeline of a run: the first stage (the
// embedded BM25/dense index over knowledge-base chunks, or a retrieval
// service), optionally an embedder and dense index, and optionally
// long-term memory. It implements Retriever and BatchRetriever and is safe
// for concurrent use.
type Pipeline struct {
	cfg      Config
	kb       *corpus.KB // nil for a service without data.kb; no passages with an on-disk index
	chunks   []Chunk    // sorted by id: position = document number (nil with an on-disk index)
	chunkPos map[string]int
	passages map[string]bool // passage ids, to check a service's ids
	bm25     *Index          // nil for a service without data.kb
	analyzer analysis.Analyzer
	emb      embedding.Embedder // nil when neither dense search nor memory needs one
	// memEmb embeds the long-term memory and the candidates it re-ranks
	// (MemoryEmbedder): emb itself unless memory.embedder names another.
	memEmb  embedding.Embedder
	lsaOnce sync.Once // fits or loads the LSA embedder once, on first need
	lsa     *embedding.LSA
	lsaErr  error
	dense   *DenseIndex     // nil unless method is dense or hybrid
	service service.Backend // the first stage when method is remote or elasticsearch
	mem     atomic.Pointer[memory.Store]
	// memBase are the memories loaded from cfg.Memory.Partitions, which
	// AttachMemory extends with the data's own.
	memBase []memory.Entry
	// chunkVecs caches E(c) per chunk for memory re-ranking when there is no
	// dense index: rollouts retrieve the same chunks over and over.
	chunkVecs []atomic.Pointer[[]float32]
	// textVecs does the same for chunks a service returns, keyed by text.
	textVecs embedding.VecMemo
}

// Open builds the retrieval pipeline from config: loads the KB (JSONL or
// Parquet {id,title,text}, or Pyserini's {id,contents}), chunks it, loads
// cfg.Index if set (verifying it matches the KB, the chunking, k1/b and the
// format version) or builds BM25 in memory, sets up the embedder and dense
// index when cfg.Method needs them, and long-term memory when
// cfg.Memory.Enabled (from cfg.Memory.Partitions if set, else empty until
// SetMemory). For method remote or elasticsearch the service is probed
// instead, and kbPath is optional: when given, the KB's ids check what the
// service returns and its BM25 statistics answer IDF.
func Open(ctx context.Context, cfg Config, kbPath string, opts ...OpenOption) (*Pipeline, error) {
	var o openOptions
	for _, opt := range opts {
		opt(&o)
	}
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("retrieval config: %w", err)
	}
	p := &Pipeline{cfg: cfg, textVecs: embedding.VecMemo{Max: 1 << 16}}
	var err error
	switch {
	case kbPath != "":
		if err := p.openKB(ctx, kbPath); err != nil {
			return nil, err
		}
	case !cfg.UsesService():
		return nil, fmt.Errorf("retrieval method %s needs a knowledge base (data.kb)", cfg.Method)
	default:
		if p.analyzer, err = analysis.New(cfg.Analyzer); err != nil {
			return nil, err
		}
	}
	if cfg.UsesService() {
		if p.service, err = openService(ctx, cfg); err != nil {
			return nil, err
		}
	}
	if cfg.Method == "dense" || cfg.Method == "hybrid" || (cfg.Memory.Enabled && cfg.MemoryEmbedder() == cfg.Embedder) {
		if p.emb, err = p.Embedder(); err != nil {
			return nil, err
		}
	}
	if cfg.Memory.Enabled {
		if p.memEmb, err = p.MemoryEmbedder(); err != nil {
			return nil, fmt.Errorf("memory embedder: %w", err)
		}
	}
	if cfg.Method == "dense" || cfg.Method == "hybrid" {
		texts, err := p.allTexts()
		if err != nil {
			return nil, err
		}
		cache, err := embedCacheDir(cfg)
		if err != nil {
			return nil, err
		}
		if p.dense, err = EmbedDocsCached(ctx, p.emb, texts, max(cfg.EmbedBatch, 256), cache, o.embedProgress); err != nil {
			return nil, err
		}
		slog.Info("retrieval: dense index ready", "embedder", p.emb.Name(), "dim", p.dense.Dim())
	}
	if cfg.Memory.Enabled && cfg.Memory.Partitions != "" {
		m, err := memory.Load(ctx, cfg.Memory.Partitions, cfg.Memory, p.memEmb)
		if err != nil {
			return nil, err
		}
		p.mem.Store(m)
		p.memBase = m.Entries()
		slog.Info("retrieval: long-term memory loaded", "file", cfg.Memory.Partitions, "memories", m.Len())
	}
	return p, nil
}

// openKB loads and chunks the knowledge base and builds (or loads) its BM25 index.
func (p *Pipeline) openKB(ctx context.Context, kbPath string) error {
	cfg := p.cfg
	start := time.Now()
	if cfg.Index != "" && HasDiskIndex(cfg.Index) {
		return p.openDisk(ctx, kbPath, start)
	}
	kb, err := corpus.LoadLimited(ctx, kbPath, cfg.KBLimits())
	if err != nil {
		return err
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		return err
	}
	p.kb, p.chunks = kb, chunks
	p.chunkPos = make(map[string]int, len(chunks))
	p.chunkVecs = make([]atomic.Pointer[[]float32], len(chunks))
	for i, c := range chunks {
		p.chunkPos[c.ID] = i
	}
	if cfg.Index != "" {
		ix, meta, err := LoadIndex(ctx, cfg.Index)
		if err != nil {
			return err
		}
		if err := checkIndexMatches(meta, ix, kb, chunks, cfg); err != nil {
			return fmt.Errorf("index %s: %w", cfg.Index, err)
		}
		p.bm25 = ix
	} else {
		an, err := analysis.New(cfg.Analyzer)
		if err != nil {
			return err
		}
		ids, texts := chunkTexts(chunks)
		if p.bm25, err = BuildIndexWith(ids, texts, BM25Params{K1: cfg.K1, B: cfg.B, Scoring: cfg.Scoring}, an); err != nil {
			return err
		}
	}
	p.analyzer = p.bm25.Analyzer()
	what := "retrieval: BM25 ready"
	if cfg.UsesService() {
		// The first stage is the service; the local index only checks its
		// ids and gives the embedded policy its term statistics.
		what = "retrieval: knowledge base loaded (ids and term statistics for the service's results)"
		p.passages = make(map[string]bool, len(kb.Passages))
		for _, ps := range kb.Passages {
			p.passages[ps.ID] = true
		}
	}
	slog.Info(what, "kb", kbPath, "passages", len(kb.Passages), "chunks", len(chunks),
		"terms", p.bm25.NumTerms(), "persisted", cfg.Index != "", "elapsed_s", progress.Seconds(time.Since(start)))
	return nil
}

// openService connects to the configured retrieval service and probes it.
func openService(ctx context.Context, cfg Config) (service.Backend, error) {
	switch cfg.Method {
	case MethodRemote:
		r, err := service.NewRemoteService(cfg.Remote, 1)
		if err != nil {
			return nil, fmt.Errorf("retrieval.remote: %w", err)
		}
		if err := r.Probe(ctx); err != nil {
			return nil, err
		}
		slog.Info("retrieval: service ready", "backend", r.Name(), "max_batch", r.MaxBatch())
		return r, nil
	case MethodElastic:
		e, err := service.NewElastic(cfg.Elasticsearch, 1)
		if err != nil {
			return nil, fmt.Errorf("retrieval.elasticsearch: %w", err)
		}
		if err := e.Probe(ctx); err != nil {
			return nil, err
		}
		s := e.Similarity
		slog.Info("retrieval: elasticsearch index ready", "index", s.Index, "docs", s.Docs, "similarity", s.Name,
			"type", s.Type, "k1", s.K1, "b", s.B)
		if s.Type != "BM25" {
			slog.Warn("retrieval: the index does not rank the text field with BM25", "index", s.Index, "type", s.Type)
		} else if s.K1 != cfg.K1 || s.B != cfg.B {
			slog.Info("retrieval: the index's BM25 parameters apply, not retrieval.k1/b", "index_k1", s.K1, "index_b", s.B,
				"config_k1", cfg.K1, "config_b", cfg.B)
		}
		return e, nil
	}
	return nil, fmt.Errorf("retrieval method %q is not a service", cfg.Method)
}

// knownID reports whether a service's document id is a chunk or a passage
// of the configured knowledge base; nil without one (nothing to check).
func (p *Pipeline) knownID() func(string) bool {
	if p.kb == nil {
		return nil
	}
	return func(id string) bool {
		if p.chunks == nil { // on disk: every passage has a window 0
			_, ok := p.bm25.DocNum(id)
			_, ok0 := p.bm25.DocNum(id + "#0")
			return ok || ok0
		}
		_, ok := p.chunkPos[id]
		return ok || p.passages[id]
	}
}

// HasPassage reports whether id is a passage of the configured knowledge
// base (every passage has a window "#0"); checked is false when there is no
// knowledge base to ask (a service without data.kb).
func (p *Pipeline) HasPassage(id string) (has, checked bool) {
	if p.kb == nil {
		return false, false
	}
	if p.chunks == nil { // on disk
		_, ok := p.bm25.DocNum(id + "#0")
		return ok, true
	}
	_, ok := p.chunkPos[id+"#0"]
	return ok, true
}

// Service returns the retrieval service of method remote or elasticsearch (nil otherwise).
func (p *Pipeline) Service() service.Backend { return p.service }

// Served says what the pipeline's first stage serves (service.NewHandler's
// GET /health).
func (p *Pipeline) Served() service.Served {
	return service.Served{Method: p.cfg.Method, Documents: p.NumChunks(), Analyzer: p.analyzer.ID()}
}

// Close releases a service's connections.
func (p *Pipeline) Close() {
	if p.service != nil {
		p.service.Close()
	}
	if p.bm25 != nil {
		_ = p.bm25.Close() // unmaps an on-disk index
	}
}

// sortedChunks chunks the KB and orders chunks by id, the document order of
// every index.
func sortedChunks(kb *corpus.KB, cfg Config) ([]Chunk, error) {
	chunks, err := corpus.ChunkPassages(kb.Passages, cfg.ChunkWords, cfg.ChunkStride)
	if err != nil {
		return nil, err
	}
	slices.SortFunc(chunks, func(a, b Chunk) int { return strings.Compare(a.ID, b.ID) })
	return chunks, nil
}

// BuildIndexDir builds the BM25 index of a knowledge base with cfg's k1, b
// and chunking and persists it in dir (what `himes index build` does).
func BuildIndexDir(ctx context.Context, cfg Config, kbPath, dir string) (IndexMeta, error) {
	return BuildIndexDirProgress(ctx, cfg, kbPath, dir, nil)
}

// BuildProgress is told how far an index build got: its stage ("index",
// "analyze", "merge") and the items of the stage done of total, first with
// done 0 as the stage starts.
type BuildProgress func(stage string, done, total int)

// BuildIndexDirProgress is BuildIndexDir telling progress (when set) the
// chunks indexed so far.
func BuildIndexDirProgress(ctx context.Context, cfg Config, kbPath, dir string, progress BuildProgress) (IndexMeta, error) {
	kb, err := corpus.LoadLimited(ctx, kbPath, cfg.KBLimits())
	if err != nil {
		return IndexMeta{}, err
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		return IndexMeta{}, err
	}
	an, err := analysis.New(cfg.Analyzer)
	if err != nil {
		return IndexMeta{}, err
	}
	ids, texts := chunkTexts(chunks)
	ix, err := buildIndex(ids, texts, BM25Params{K1: cfg.K1, B: cfg.B, Scoring: cfg.Scoring}, an, progress)
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
	if cfg.UsesEmbedder("lsa") {
		lsa, err := embedding.FitLSA(ctx, texts, embedding.LSAConfig{Dim: cfg.LSADim, MinDF: cfg.LSAMinDF},
			embedding.LSAMeta{KBFingerprint: kb.Fingerprint, ChunkWords: cfg.ChunkWords, ChunkStride: cfg.ChunkStride})
		if err != nil {
			return IndexMeta{}, err
		}
		if err := embedding.SaveLSA(ctx, dir, lsa); err != nil {
			return IndexMeta{}, err
		}
	}
	return ReadIndexMeta(dir)
}

func chunkTexts(chunks []Chunk) (ids, texts []string) {
	ids = make([]string, len(chunks))
	texts = make([]string, len(chunks))
	for i, c := range chunks {
		ids[i], texts[i] = c.ID, c.IndexText()
	}
	return ids, texts
}

// allTexts is what the index sees of every chunk (see allChunks).
func (p *Pipeline) allTexts() ([]string, error) {
	chunks, err := p.allChunks()
	if err != nil {
		return nil, err
	}
	_, texts := chunkTexts(chunks)
	return texts, nil
}

// checkIndexMatches refuses a persisted index built from another KB, with
// other chunking or other BM25 parameters.
func checkIndexMatches(meta IndexMeta, ix *Index, kb *corpus.KB, chunks []Chunk, cfg Config) error {
	if meta.KBFingerprint != kb.Fingerprint {
		return fmt.Errorf("stale: built from a knowledge base with SHA-256 %.12s…, %s has %.12s…: rebuild with `himes index build`",
			meta.KBFingerprint, kb.Path, kb.Fingerprint)
	}
	if err := checkIndexConfig(meta, cfg); err != nil {
		return err
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

// checkIndexConfig refuses an index built with other chunking, analysis or
// BM25 parameters than cfg.
func checkIndexConfig(meta IndexMeta, cfg Config) error {
	if meta.ChunkWords != cfg.ChunkWords || meta.ChunkStride != cfg.ChunkStride {
		return fmt.Errorf("built with chunk_words=%d chunk_stride=%d, config says %d/%d",
			meta.ChunkWords, meta.ChunkStride, cfg.ChunkWords, cfg.ChunkStride)
	}
	if an, _ := analysis.New(cfg.Analyzer); an.ID() != meta.Analyzer {
		return fmt.Errorf("built with analyzer %q, config says %q (%s)", meta.Analyzer, cfg.Analyzer, an.ID())
	}
	if meta.Params.K1 != cfg.K1 || meta.Params.B != cfg.B {
		return fmt.Errorf("built with k1=%v b=%v, config says k1=%v b=%v", meta.Params.K1, meta.Params.B, cfg.K1, cfg.B)
	}
	if got := normScoring(meta.Params.Scoring); got != normScoring(cfg.Scoring) {
		return fmt.Errorf("built for scoring %q, config says %q: rebuild with `himes index build`", got, normScoring(cfg.Scoring))
	}
	return nil
}

// OpenOption adjusts Open.
type OpenOption func(*openOptions)

type openOptions struct {
	embedProgress func(done, total int)
}

// WithEmbedProgress tells progress how many knowledge-base texts the dense
// index has embedded (a bar on a terminal; without it, a log line every 5 s).
func WithEmbedProgress(progress func(done, total int)) OpenOption {
	return func(o *openOptions) { o.embedProgress = progress }
}

// embedCacheDir is the embedding cache directory cfg.EmbedCache names:
// "" = <user cache dir>/himes/embed, "off" = none ("").
func embedCacheDir(cfg Config) (string, error) {
	switch cfg.EmbedCache {
	case "off":
		return "", nil
	case "":
		dir, err := os.UserCacheDir()
		if err != nil {
			return "", fmt.Errorf("embed cache: %w (set retrieval.embed_cache)", err)
		}
		return filepath.Join(dir, "himes", "embed"), nil
	}
	return cfg.EmbedCache, nil
}

// NewEmbedder builds the embedder cfg.Embedder names.
func NewEmbedder(cfg Config) (embedding.Embedder, error) {
	switch cfg.Embedder {
	case "hash":
		return embedding.NewHash(cfg.HashDim)
	case "ollama":
		if cfg.OllamaURL == LaunchOllama {
			// Only the commands that start the server replace "launch"
			// with its URL before they get here.
			return nil, fmt.Errorf("retrieval.ollama_url %q: this command does not start an Ollama server (himes train and eval do): pass --set retrieval.ollama_url=URL of a running one", LaunchOllama)
		}
		cache, err := embedCacheDir(cfg)
		if err != nil {
			return nil, err
		}
		o, err := embedding.NewOllama(cfg.OllamaURL, cfg.EmbedModel, cfg.EmbedBatch, cache)
		if err != nil {
			return nil, err
		}
		return o, o.SetThreads(cfg.EmbedThreads)
	case "e5":
		cache, err := embedCacheDir(cfg)
		if err != nil {
			return nil, err
		}
		return embedding.NewE5(cfg.E5.URL, cfg.E5.Prefixes(), cfg.EmbedBatch, cache)
	case "lsa":
		return nil, fmt.Errorf("embedder lsa is fitted on the knowledge base: get it from the retrieval pipeline (retrieval.Open, then Embedder)")
	default:
		return nil, fmt.Errorf("embedder %q: want hash, lsa, ollama or e5", cfg.Embedder)
	}
}

// EmbedderNames are the fingerprinted names of the dense first stage's
// embedder ("" without a dense index) and of the attached long-term
// memory's ("" without one, or with memory off): what an evaluation
// records so that its outputs say which spaces produced them.
func (p *Pipeline) EmbedderNames() (dense, memory string) {
	if p.dense != nil {
		dense = p.dense.name
	}
	if m := p.mem.Load(); m != nil && p.cfg.Memory.Enabled {
		memory = m.Embedder().Name()
	}
	return dense, memory
}

// Config returns the pipeline's configuration.
func (p *Pipeline) Config() Config { return p.cfg }

// KB returns the loaded knowledge base.
func (p *Pipeline) KB() *corpus.KB { return p.kb }

// Index returns the BM25 index.
func (p *Pipeline) Index() *Index { return p.bm25 }

// Chunks returns all chunks in document order (callers must not modify
// them); nil with an on-disk index, whose chunks stay on disk (see Chunk,
// NumChunks).
func (p *Pipeline) Chunks() []Chunk { return p.chunks }

// NumChunks is the number of chunks (documents) of the knowledge base.
func (p *Pipeline) NumChunks() int {
	if p.chunks == nil && p.bm25 != nil {
		return p.bm25.Len()
	}
	return len(p.chunks)
}

// Chunk returns the chunk with the given id (read from the document store
// with an on-disk index).
func (p *Pipeline) Chunk(id string) (Chunk, bool) {
	i, ok := p.chunkIndex(id)
	if !ok {
		return Chunk{}, false
	}
	c, err := p.chunkAt(i)
	return c, err == nil
}

// chunkIndex is the document number of a chunk id.
func (p *Pipeline) chunkIndex(id string) (int, bool) {
	if p.chunks == nil {
		if p.bm25 == nil {
			return 0, false
		}
		return p.bm25.DocNum(id)
	}
	i, ok := p.chunkPos[id]
	return i, ok
}

// chunkAt is chunk i, from the document store with an on-disk index.
func (p *Pipeline) chunkAt(i int) (Chunk, error) {
	if p.chunks != nil {
		return p.chunks[i], nil
	}
	title, text, err := p.bm25.Doc(i)
	if err != nil {
		return Chunk{}, err
	}
	id := p.bm25.ID(i)
	return Chunk{ID: id, PassageID: corpus.ChunkPassageID(id), Title: title, Text: text}, nil
}

// allChunks returns every chunk, reading them all from an on-disk index's
// document store (for the stages that need every text: dense, LSA).
func (p *Pipeline) allChunks() ([]Chunk, error) {
	if p.chunks != nil {
		return p.chunks, nil
	}
	out := make([]Chunk, p.bm25.Len())
	for i := range out {
		c, err := p.chunkAt(i)
		if err != nil {
			return nil, err
		}
		out[i] = c
	}
	return out, nil
}

// PassageOf returns the passage id of a chunk id ("" if unknown).
func (p *Pipeline) PassageOf(chunkID string) string {
	if i, ok := p.chunkIndex(chunkID); ok {
		if p.chunks == nil {
			return corpus.ChunkPassageID(p.bm25.ID(i))
		}
		return p.chunks[i].PassageID
	}
	return ""
}

// IDF is the BM25 (Lucene) idf of a term in the KB after the index's
// analysis, 0 for unknown terms (and for every term with a service but no
// data.kb).
func (p *Pipeline) IDF(term string) float64 {
	if p.bm25 == nil {
		return 0
	}
	return p.bm25.IDF(term)
}

// HasTermStats reports whether IDF knows the knowledge base.
func (p *Pipeline) HasTermStats() bool { return p.bm25 != nil }

// Tokenize is the index's analyzer.
func (p *Pipeline) Tokenize(text string) []string { return p.analyzer.Tokenize(text) }

// Embedder returns the pipeline's embedder, creating it from the config if
// no stage needed one yet (so memories can be built in the same space). The
// LSA embedder is loaded from the persisted index (refused when stale) or,
// without one, fitted on the knowledge base's chunks.
func (p *Pipeline) Embedder() (embedding.Embedder, error) {
	if p.emb != nil {
		return p.emb, nil
	}
	if p.cfg.Embedder != "lsa" {
		return NewEmbedder(p.cfg)
	}
	return p.lsaEmbedder()
}

// MemoryEmbedder returns the long-term memory's embedder: the pipeline's
// own (Embedder) unless retrieval.memory.embedder names another. Memories,
// the texts that activate them and the candidates they re-rank are all
// embedded by it, so they share one space whatever the first stage uses.
func (p *Pipeline) MemoryEmbedder() (embedding.Embedder, error) {
	switch name := p.cfg.MemoryEmbedder(); {
	case p.memEmb != nil:
		return p.memEmb, nil
	case name == p.cfg.Embedder:
		return p.Embedder()
	case name == "lsa":
		return p.lsaEmbedder()
	default:
		return NewEmbedder(p.cfg.ForMemory())
	}
}

// lsaEmbedder is the LSA embedder: loaded from the persisted index (refused
// when stale) or, without one, fitted on the knowledge base's chunks, once.
func (p *Pipeline) lsaEmbedder() (embedding.Embedder, error) {
	if p.kb == nil {
		return nil, errors.New("the lsa embedder is fit on the knowledge base: set data.kb (a retrieval service alone has no corpus to fit it on)")
	}
	p.lsaOnce.Do(func() {
		meta := embedding.LSAMeta{KBFingerprint: p.kb.Fingerprint, ChunkWords: p.cfg.ChunkWords, ChunkStride: p.cfg.ChunkStride}
		lcfg := embedding.LSAConfig{Dim: p.cfg.LSADim, MinDF: p.cfg.LSAMinDF}
		start := time.Now()
		if p.cfg.Index != "" {
			p.lsa, p.lsaErr = embedding.LoadLSA(context.Background(), p.cfg.Index, meta, lcfg)
		} else {
			var texts []string
			if texts, p.lsaErr = p.allTexts(); p.lsaErr != nil {
				return
			}
			p.lsa, p.lsaErr = embedding.FitLSA(context.Background(), texts, lcfg, meta)
		}
		if p.lsaErr == nil {
			slog.Info("retrieval: LSA embedder ready", "name", p.lsa.Name(), "persisted", p.cfg.Index != "",
				"elapsed_s", progress.Seconds(time.Since(start)))
		}
	})
	if p.lsaErr != nil {
		return nil, p.lsaErr
	}
	return p.lsa, nil
}

// SetMemory attaches a long-term memory store (built by `himes memory
// build`, LoadMemory or BuildMemory). Its embedder must be the pipeline's
// memory embedder (same name), since chunk and memory vectors are
// compared. Memory is used by Retrieve only when cfg.Memory.Enabled.
func (p *Pipeline) SetMemory(m *memory.Store) error {
	if m != nil && p.memEmb != nil && m.Embedder().Name() != p.memEmb.Name() {
		return fmt.Errorf("set memory: memories embedded with %s, the pipeline's memory embeds with %s", m.Embedder().Name(), p.memEmb.Name())
	}
	if m != nil && p.memEmb == nil && p.cfg.Memory.Enabled {
		// cannot happen through Open (memory on creates the embedder); the
		// chunk-vector cache must never mix embedding spaces
		return fmt.Errorf("set memory: pipeline has no embedder")
	}
	p.mem.Store(m)
	return nil
}

// Memory returns the attached memory store (nil if none).
func (p *Pipeline) Memory() *memory.Store { return p.mem.Load() }

// Search is the first stage alone: the top k chunks for text by the
// configured method (bm25, dense, hybrid by RRF of the two, or the service).
func (p *Pipeline) Search(ctx context.Context, text string, k int) ([]Ranked, error) {
	if p.service != nil {
		lists, errs := service.Search(ctx, p.service, []string{text}, k, p.knownID())
		return lists[0], errs[0]
	}
	return p.searchLocal(ctx, text, k)
}

// SearchBatch is Search for many texts: one service call per batch of
// retrieval.<service>.max_batch distinct texts, or the embedded index on
// every core. errs[i] is text i's failure.
func (p *Pipeline) SearchBatch(ctx context.Context, texts []string, k int) ([][]Ranked, []error) {
	if p.service != nil {
		return service.Search(ctx, p.service, texts, k, p.knownID())
	}
	lists := make([][]Ranked, len(texts))
	errs := make([]error, len(texts))
	// One worker per core takes the queries in turn: a goroutine per query
	// would be started (and woken) for every rollout of the step.
	var wg sync.WaitGroup
	var next atomic.Int64
	for range min(runtime.GOMAXPROCS(0), len(texts)) {
		wg.Go(func() {
			for i := int(next.Add(1) - 1); i < len(texts); i = int(next.Add(1) - 1) {
				lists[i], errs[i] = p.searchLocal(ctx, texts[i], k)
			}
		})
	}
	wg.Wait()
	return lists, errs
}

// searchLocal is the embedded first stage.
func (p *Pipeline) searchLocal(ctx context.Context, text string, k int) ([]Ranked, error) {
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
	default:
		return nil, fmt.Errorf("search: method %s: %w", p.cfg.Method, errNoService)
	}
	out := make([]Ranked, len(hits))
	for i, h := range hits {
		c, err := p.chunkAt(h.Doc)
		if err != nil {
			return nil, err
		}
		out[i] = Ranked{Chunk: c, Score: h.Score}
	}
	return out, nil
}

// Retrieve retrieves cfg.Candidates chunks for the rewrite (the query when
// the rewrite is empty), activates long-term memory with the user's original
// query, re-ranks with the activated memories (see RetrieveAt), and returns
// the top cfg.TopK with a trace. With memory off, or nothing activated, the
// final ranking is the retrieval order.
func (p *Pipeline) Retrieve(ctx context.Context, user, rewrite, query string) (Result, error) {
	return p.RetrieveAt(ctx, user, rewrite, query, 0)
}

// RetrieveAt is Retrieve with long-term memory seen from position seq of the
// user's question history (see memory.Store.ActivateAt; 0: every memory), so
// that a turn never activates its own or a later question. The activated
// memories re-rank the candidates only when the most similar of them has a
// cosine with the query of at least cfg.Memory.RerankFloor; the re-rank
// fuses the mean memory similarity with the retrieval score by
// cfg.Memory.RetrievalWeight (see Rerank).
func (p *Pipeline) RetrieveAt(ctx context.Context, user, rewrite, query string, seq int64) (Result, error) {
	res, errs := p.RetrieveBatch(ctx, []Request{{User: user, Rewrite: rewrite, Query: query, Seq: seq}})
	return res[0], errs[0]
}

// RetrieveBatch is Retrieve for many requests: the first stage for all of
// them at once (one service call per batch), then memory activation of
// each, then re-ranking of each. With an embedder that keeps its vectors
// (embedding.Prefetcher: a served model), every text a stage embeds — the
// dense queries, the activation queries, the candidates to re-rank — is
// embedded ahead for the whole batch, each distinct text once and in the
// embedder's batches, instead of one request per text; the vectors, and so
// the results, are the same (TestRetrieveBatchPrefetchSameResults). Of the
// candidates to re-rank only those that can still enter the top k are
// embedded (rerankKeep; the top k is the full re-rank's,
// TestRetrieveBatchPrunesWithTheSameResults).
// errs[i] is request i's failure (callers name the stage: "retrieve").
func (p *Pipeline) RetrieveBatch(ctx context.Context, reqs []Request) ([]Result, []error) {
	texts := make([]string, len(reqs))
	for i, r := range reqs {
		texts[i] = r.Rewrite
		if strings.TrimSpace(texts[i]) == "" {
			texts[i] = r.Query
		}
	}
	if p.service == nil && (p.cfg.Method == "dense" || p.cfg.Method == "hybrid") {
		prefetch(ctx, p.emb, "dense queries", texts)
	}
	// Callers name the stage ("retrieve: ..." in the ledger): these errors
	// name the part of it that failed.
	cands, errs := p.SearchBatch(ctx, texts, p.cfg.Candidates)
	for i := range reqs {
		if errs[i] != nil {
			errs[i] = fmt.Errorf("first-stage search: %w", errs[i])
		}
	}
	m := p.mem.Load()
	if m != nil {
		var q []string
		for i, r := range reqs {
			if t, ok := p.activationText(m, r, cands[i]); ok && errs[i] == nil {
				q = append(q, t)
			}
		}
		prefetch(ctx, m.Embedder(), "memory queries", q)
	}
	acts := make([]activation, len(reqs))
	p.each(reqs, errs, func(i int) error {
		var err error
		acts[i], err = p.activate(ctx, m, reqs[i], cands[i])
		return err
	})
	if m != nil {
		// The candidates to re-rank, in two rounds: the first k of each
		// request, then those of the rest that can still reach its top k
		// (rerankKeep).
		emb := m.Embedder()
		var c []string
		for i := range reqs {
			if errs[i] == nil && acts[i].rerank {
				c = append(c, p.missingCandidateTexts(emb, p.rerankHead(emb, cands[i]))...)
			}
		}
		prefetch(ctx, emb, "re-ranked candidates", c)
		p.each(reqs, errs, func(i int) error {
			if !acts[i].rerank {
				return nil
			}
			var err error
			acts[i].keep, err = p.rerankKeep(ctx, emb, cands[i], acts[i].memVecs, false)
			return err
		})
		c = c[:0]
		for i := range reqs {
			if errs[i] == nil && acts[i].rerank {
				c = append(c, p.missingCandidateTexts(emb, pick(cands[i], acts[i].keep))...)
			}
		}
		prefetch(ctx, emb, "re-ranked candidates", c)
	}
	out := make([]Result, len(reqs))
	p.each(reqs, errs, func(i int) error {
		var err error
		out[i], _, err = p.finish(ctx, m, reqs[i], cands[i], acts[i], false)
		return err
	})
	return out, errs
}

// each runs f(i) for every request without an error yet, on every core,
// recording its error in errs[i].
func (p *Pipeline) each(reqs []Request, errs []error, f func(i int) error) {
	var eg errgroup.Group
	eg.SetLimit(runtime.GOMAXPROCS(0))
	for i := range reqs {
		if errs[i] != nil {
			continue
		}
		eg.Go(func() error {
			errs[i] = f(i)
			return nil
		})
	}
	_ = eg.Wait()
}

// prefetch embeds texts ahead with e when it keeps its vectors
// (embedding.Prefetcher). A failure is only logged: each text is embedded
// again where it is needed, and fails there, for its own request only.
func prefetch(ctx context.Context, e embedding.Embedder, what string, texts []string) {
	pf, ok := e.(embedding.Prefetcher)
	if !ok || len(texts) < 2 {
		return
	}
	if err := pf.Prefetch(ctx, texts); err != nil && ctx.Err() == nil {
		slog.Warn("embedding ahead failed; embedding one request at a time", "what", what, "texts", len(texts), "err", err)
	}
}

var (
	_ Retriever      = (*Pipeline)(nil)
	_ BatchRetriever = (*Pipeline)(nil)
)

// errNoService marks a pipeline method that needs the embedded index.
var errNoService = errors.New("not available with a retrieval service (method remote or elasticsearch)")
