package grpo

import "github.com/himes-rl/himes/internal/fielderr"

// Config is the "grpo" section: the training loop's knobs.
type Config struct {
	Steps int `yaml:"steps"`
	// PromptsPerStep is the number of prompts (groups) drawn per step.
	PromptsPerStep int `yaml:"prompts_per_step"`
	// GroupSize is G, rewrites sampled per prompt.
	GroupSize    int             `yaml:"group_size"`
	Temperature  float64         `yaml:"temperature"`
	LearningRate float64         `yaml:"learning_rate"`
	Advantage    AdvantageConfig `yaml:"advantage"`
}

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{Steps: 50, PromptsPerStep: 8, GroupSize: 8, Temperature: 1.0, LearningRate: 1e-5,
		Advantage: DefaultAdvantageConfig()}
}

// Validate checks ranges.
func (c Config) Validate() error {
	if c.Steps < 0 {
		return fielderr.New("steps", "must be ≥ 0, got %d", c.Steps)
	}
	if c.PromptsPerStep < 1 {
		return fielderr.New("prompts_per_step", "must be ≥ 1, got %d", c.PromptsPerStep)
	}
	if c.GroupSize < 2 {
		return fielderr.New("group_size", "must be ≥ 2 (GRPO needs a group to compare), got %d", c.GroupSize)
	}
	if c.Temperature < 0 {
		return fielderr.New("temperature", "must be ≥ 0, got %v", c.Temperature)
	}
	if c.LearningRate <= 0 {
		return fielderr.New("learning_rate", "must be > 0, got %v", c.LearningRate)
	}
	if err := c.Advantage.Validate(); err != nil {
		return fielderr.Prefix("advantage", err)
	}
	return nil
}
