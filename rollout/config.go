package rollout

import "github.com/himes-rl/himes/internal/fielderr"

// Config is the "rollout" section: the responder and how rollouts fan out.
type Config struct {
	// Responder is "extractive" (embedded default), "ollama" or "openai".
	Responder string `yaml:"responder"`
	// Concurrency bounds in-flight rollouts overall.
	Concurrency int          `yaml:"concurrency"`
	Ollama      OllamaConfig `yaml:"ollama"`
}

// OllamaConfig configures the frozen response model served by Ollama.
type OllamaConfig struct {
	Model string   `yaml:"model"`
	Hosts []string `yaml:"hosts"` // empty: OLLAMA_HOST or http://127.0.0.1:11434
}

// DefaultConfig returns the embedded defaults.
func DefaultConfig() Config {
	return Config{Responder: "extractive", Concurrency: 16}
}

// Validate checks modes and ranges.
func (c Config) Validate() error {
	switch c.Responder {
	case "extractive", "ollama", "openai":
	default:
		return fielderr.New("responder", "must be extractive, ollama or openai, got %q", c.Responder)
	}
	if c.Concurrency < 1 {
		return fielderr.New("concurrency", "must be ≥ 1, got %d", c.Concurrency)
	}
	if c.Responder == "ollama" && c.Ollama.Model == "" {
		return fielderr.New("ollama.model", "is required when responder is ollama")
	}
	return nil
}
