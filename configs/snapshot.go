package configs

import (
	"fmt"
	"os"
	"path/filepath"

	"gopkg.in/yaml.v3"
)

// LoadRunSnapshot reads runDir/config.yaml, the resolved config the run saved,
// over the defaults. Unknown keys are tolerated (the run may come from
// another version); paths are kept as saved.
func LoadRunSnapshot(runDir string) (Config, error) {
	path := filepath.Join(runDir, "config.yaml")
	cfg := Default()
	raw, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("run config: %w", err)
	}
	if err := yaml.Unmarshal(raw, &cfg); err != nil {
		return cfg, fmt.Errorf("%s: %w", path, err)
	}
	if err := cfg.Reward.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: reward: %w", path, err)
	}
	if err := cfg.GRPO.Advantage.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: grpo.advantage: %w", path, err)
	}
	return cfg, nil
}
