package retrieval

import "github.com/himes-rl/himes/internal/fielderr"

// Config is the "retrieval" section of a run config. The retrieval package owns it.
type Config struct {
	// Method is "bm25" (embedded default), "dense" or "hybrid".
	Method string `yaml:"method"`
	// TopK chunks handed to the responder after re-ranking.
	TopK int `yaml:"top_k"`
	// Candidates retrieved by the first stage before re-ranking.
	Candidates int     `yaml:"candidates"`
	K1         float64 `yaml:"k1"`
	B          float64 `yaml:"b"`
	// ChunkWords and ChunkStride set the word windows; 0 means one chunk per passage.
	ChunkWords  int `yaml:"chunk_words"`
	ChunkStride int `yaml:"chunk_stride"`
	// Index is an optional path to a persisted index built by `himes index build`.
	Index string `yaml:"index"`
	// Embedder is "hash" (embedded default) or "ollama".
	Embedder string       `yaml:"embedder"`
	Memory   MemoryConfig `yaml:"memory"`
}

// MemoryConfig configures HiMeS long-term memory (activation and re-ranking).
type MemoryConfig struct {
	Enabled bool `yaml:"enabled"`
	// TopN historical queries activated (H_n).
	TopN int `yaml:"top_n"`
}

// DefaultConfig returns the embedded defaults (Pyserini's BM25 parameters).
func DefaultConfig() Config {
	return Config{Method: "bm25", TopK: 3, Candidates: 20, K1: 0.9, B: 0.4, Embedder: "hash",
		Memory: MemoryConfig{Enabled: false, TopN: 5}}
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
	return nil
}
