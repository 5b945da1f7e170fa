package datasets

import "github.com/himes-rl/himes/internal/fielderr"

// Config selects the data a run trains and evaluates on, and how prompts
// for the rewriter are rendered. The datasets package owns these knobs.
type Config struct {
	// Train is the GRPO prompt set (normalized JSONL or Parquet).
	Train string `yaml:"train"`
	// Eval is the held-out set; empty means split EvalFraction off Train by conversation.
	Eval string `yaml:"eval"`
	// EvalFraction of conversations held out when Eval is empty.
	EvalFraction float64 `yaml:"eval_fraction"`
	// SFT is the supervised (prompt, rewrite) data; empty means derive it from Train.
	SFT string `yaml:"sft"`
	// KB is the knowledge base of passages (JSONL or Parquet).
	KB string `yaml:"kb"`
	// UserField names what identifies a long-term-memory user: conv_id, topic, or meta.<column>.
	UserField string `yaml:"user_field"`
}

// DefaultConfig returns the defaults documented in configs/README.md.
func DefaultConfig() Config {
	return Config{EvalFraction: 0.2, UserField: "conv_id"}
}

// Validate checks ranges; file existence is checked by the loaders.
func (c Config) Validate() error {
	if c.Train == "" {
		return fielderr.New("train", "is required")
	}
	if c.EvalFraction < 0 || c.EvalFraction >= 1 {
		return fielderr.New("eval_fraction", "must be in [0, 1), got %v", c.EvalFraction)
	}
	return nil
}
