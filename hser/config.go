package hser

import (
	"math"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Weights are the HSER coefficients: R = RougeL_F1 + Alpha·EM + Beta·Hit.
type Weights struct {
	// Alpha weighs exact match (EM) in the reward.
	Alpha float64 `yaml:"alpha" json:"alpha"`
	// Beta weighs Hit (the answer — or, with hit "gold", the reference —
	// occurs in the retrieved content).
	Beta float64 `yaml:"beta" json:"beta"`
}

// Config is the reward's configuration (the "reward" section of a run config).
type Config struct {
	Weights `yaml:",inline"`
	// Tokenizer is "unicode" (default) or "rouge-score" (bit-exact with Google's rouge-score).
	Tokenizer string `yaml:"tokenizer" json:"tokenizer"`
	// Stem applies NLTK's Porter stemmer to tokens longer than 3 characters,
	// as rouge-score's use_stemmer does; with the unicode tokenizer only to
	// tokens made of ASCII letters and digits. It affects Rouge-L only, never
	// EM, F1 or Hit. Default false.
	Stem bool `yaml:"stem" json:"stem"`
	// Hit is "answer" (the predicted answer occurs in the retrieved content, the
	// paper's definition) or "gold" (the reference answer occurs in it).
	Hit string `yaml:"hit" json:"hit"`
}

// DefaultConfig returns the paper's reward with α = β = 1.
func DefaultConfig() Config {
	return Config{Weights: Weights{Alpha: 1, Beta: 1}, Tokenizer: "unicode", Hit: "answer"}
}

// Validate rejects weights that are negative or not finite and unknown modes.
func (c Config) Validate() error {
	for _, w := range []struct {
		name string
		v    float64
	}{{"alpha", c.Alpha}, {"beta", c.Beta}} {
		if math.IsNaN(w.v) || math.IsInf(w.v, 0) || w.v < 0 {
			return fielderr.New(w.name, "must be a finite number ≥ 0, got %v", w.v)
		}
	}
	switch c.Tokenizer {
	case "unicode", "rouge-score":
	default:
		return fielderr.New("tokenizer", "must be \"unicode\" or \"rouge-score\", got %q", c.Tokenizer)
	}
	switch c.Hit {
	case "answer", "gold":
	default:
		return fielderr.New("hit", "must be \"answer\" or \"gold\", got %q", c.Hit)
	}
	return nil
}

// Hit modes accepted by Config.Hit.
const (
	HitAnswer = "answer"
	HitGold   = "gold"
)
