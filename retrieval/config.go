package retrieval

import "github.com/himes-rl/himes/internal/fielderr"

// Config is the "retrieval" section of a run config. The retrieval package owns it.
type Config struct {
	// Method is "bm25" (embedded default), "dense" or "hybrid" (BM25 + dense
	// fused by reciprocal rank fusion).
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
	// Index is an optional path to a persisted index built by `himes index build`.
	Index string `yaml:"index"`
	// Embedder is "hash" (embedded default) or "ollama".
	Embedder string       `yaml:"embedder"`
	Memory   MemoryConfig `yaml:"memory"`

	// HashDim is the hashing embedder's dimension (default 1024).
	HashDim int `yaml:"hash_dim"`
	// OllamaURL is the Ollama server for the "ollama" embedder.
	OllamaURL string `yaml:"ollama_url"`
	// EmbedModel is the Ollama embedding model (default nomic-embed-text).
	EmbedModel string `yaml:"embed_model"`
	// EmbedBatch is the number of texts per /api/embed request (default 32).
	EmbedBatch int `yaml:"embed_batch"`
	// EmbedCache is the on-disk embedding cache directory for the Ollama
	// embedder; "" means <user cache dir>/himes/embed, "off" disables it.
	EmbedCache string `yaml:"embed_cache"`
	// RRFK is the k of reciprocal rank fusion for "hybrid" (default 60).
	RRFK float64 `yaml:"rrf_k"`
}

// MemoryConfig configures HiMeS long-term memory (activation and re-ranking).
type MemoryConfig struct {
	// Enabled turns HiMeS long-term memory on: activation of the user's past queries and memory-aware re-ranking.
	Enabled bool `yaml:"enabled"`
	// TopN historical queries activated (H_n).
	TopN int `yaml:"top_n"`
	// Partitions is an optional Parquet file of memories built by
	// `himes memory build`; without it, memory starts empty (the training loop
	// attaches one built from conversations).
	Partitions string `yaml:"partitions"`
	// Taxonomy is an optional ATM taxonomy YAML; "" uses the shipped default.
	Taxonomy string `yaml:"taxonomy"`
	// Classifier is "embedding" (nearest label description, default) or
	// "ollama" (an LLM constrained to the taxonomy's labels by a JSON schema).
	Classifier string `yaml:"classifier"`
	// ClassifierURL and ClassifierModel configure the "ollama" classifier.
	ClassifierURL   string `yaml:"classifier_url"`
	ClassifierModel string `yaml:"classifier_model"`
	// MinPartition is the number of memories below which activation widens
	// to neighbouring partitions (default 5).
	MinPartition int `yaml:"min_partition"`
	// RetrievalWeight fuses the retrieval score into re-ranking:
	// (1−w)·memory + w·normalized retrieval. 0 (default) is HiMeS's pure
	// memory re-ranking; use > 0 only for ablations.
	RetrievalWeight float64 `yaml:"retrieval_weight"`
}

// DefaultConfig returns the embedded defaults (Pyserini's BM25 parameters).
func DefaultConfig() Config {
	return Config{Method: "bm25", TopK: 3, Candidates: 20, K1: 0.9, B: 0.4, Analyzer: AnalyzerPlain, Scoring: ScoringExact, Embedder: "hash",
		HashDim: 1024, OllamaURL: "http://localhost:11434", EmbedModel: "nomic-embed-text", EmbedBatch: 32, RRFK: 60,
		Memory: MemoryConfig{Enabled: false, TopN: 5, Classifier: "embedding", MinPartition: 5,
			ClassifierURL: "http://localhost:11434", ClassifierModel: "llama3.2"}}
}

// Validate checks ranges and modes.
func (c Config) Validate() error {
	switch c.Method {
	case "bm25", "dense", "hybrid":
	default:
		return fielderr.New("method", "must be bm25, dense or hybrid, got %q", c.Method)
	}
	if c.TopK < 1 {
		return fielderr.New("top_k", "must be ≥ 1, got %d", c.TopK)
	}
	if c.Candidates < c.TopK {
		return fielderr.New("candidates", "must be ≥ top_k (%d), got %d", c.TopK, c.Candidates)
	}
	if c.K1 < 0 {
		return fielderr.New("k1", "must be ≥ 0, got %v", c.K1)
	}
	if c.B < 0 || c.B > 1 {
		return fielderr.New("b", "must be in [0, 1], got %v", c.B)
	}
	if _, err := NewAnalyzer(c.Analyzer); err != nil {
		return fielderr.New("analyzer", "must be plain, english or lucene-english, got %q", c.Analyzer)
	}
	if c.Scoring != ScoringExact && c.Scoring != ScoringLucene {
		return fielderr.New("scoring", "must be exact or lucene, got %q", c.Scoring)
	}
	if c.ChunkWords < 0 {
		return fielderr.New("chunk_words", "must be ≥ 0, got %d", c.ChunkWords)
	}
	if c.ChunkWords > 0 && (c.ChunkStride < 1 || c.ChunkStride > c.ChunkWords) {
		return fielderr.New("chunk_stride", "must be in [1, chunk_words=%d], got %d", c.ChunkWords, c.ChunkStride)
	}
	switch c.Embedder {
	case "hash":
		if c.HashDim < 2 {
			return fielderr.New("hash_dim", "must be ≥ 2, got %d", c.HashDim)
		}
	case "ollama":
		if c.OllamaURL == "" {
			return fielderr.New("ollama_url", "required for embedder ollama")
		}
		if c.EmbedModel == "" {
			return fielderr.New("embed_model", "required for embedder ollama")
		}
	default:
		return fielderr.New("embedder", "must be hash or ollama, got %q", c.Embedder)
	}
	if c.EmbedBatch < 1 {
		return fielderr.New("embed_batch", "must be ≥ 1, got %d", c.EmbedBatch)
	}
	if c.RRFK <= 0 {
		return fielderr.New("rrf_k", "must be > 0, got %v", c.RRFK)
	}
	if err := c.Memory.Validate(); err != nil {
		return fielderr.Prefix("memory", err)
	}
	return nil
}

// Validate checks the memory section.
func (m MemoryConfig) Validate() error {
	if m.TopN < 0 {
		return fielderr.New("top_n", "must be ≥ 0, got %d", m.TopN)
	}
	if m.Enabled && m.TopN == 0 {
		return fielderr.New("top_n", "must be ≥ 1 when memory is enabled")
	}
	switch m.Classifier {
	case "embedding":
	case "ollama":
		if m.ClassifierURL == "" || m.ClassifierModel == "" {
			return fielderr.New("classifier_model", "classifier ollama needs classifier_url and classifier_model")
		}
	default:
		return fielderr.New("classifier", "must be embedding or ollama, got %q", m.Classifier)
	}
	if m.MinPartition < 0 {
		return fielderr.New("min_partition", "must be ≥ 0, got %d", m.MinPartition)
	}
	if m.RetrievalWeight < 0 || m.RetrievalWeight > 1 {
		return fielderr.New("retrieval_weight", "must be in [0, 1], got %v", m.RetrievalWeight)
	}
	return nil
}
