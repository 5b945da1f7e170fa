package rlcore

import (
	"math"

	"github.com/himes-rl/himes/internal/fielderr"
)

// AdvantageConfig selects how a group's rewards become advantages (the
// grpo.advantage section).
type AdvantageConfig struct {
	// Estimator: "group" (r−mean_g)/(std_g+ε), "batch" (std over the whole
	// batch), "none" (Dr. GRPO: centred only), "rloo" (leave-one-out
	// baseline), "greedy" (r − r_greedy, the reward of the group's greedy
	// rollout: SCST / ReMax; each step rolls the greedy rewrites out, and
	// dynamic_sampling must be off): the names of rlcore's registry, to
	// which a Go caller may add its own (Registry.RegisterAdvantageEstimator).
	Estimator string `yaml:"estimator"`
	// Std: "population" (divide by n; the default, GRPO's formulation) or
	// "sample" (Bessel, n−1; what torch.std and TRL compute).
	Std string `yaml:"std"`
	// Epsilon is added to the std before dividing (not under the square
	// root). Default 1e-6; TRL uses 1e-4.
	Epsilon float64 `yaml:"epsilon"`
	// Aggregation: "sum" (weighted reward, then normalize; TRL's
	// sum_then_normalize), "sum_of_normalized" (each term normalized within
	// its group by the estimator, then weighted and summed) or
	// "normalize_then_sum" (TRL's and GDPO's: sum_of_normalized, then divided
	// by its std over the batch's included rollouts + epsilon; with
	// estimator group, std sample and epsilon 1e-4 it is TRL's exactly).
	Aggregation string `yaml:"aggregation"`
	// ZeroVariance: "keep" (advantage 0) or "drop" (excluded from the update)
	// for groups whose rewards are all equal.
	ZeroVariance string `yaml:"zero_variance"`
}

// DefaultAdvantageConfig is GRPO's group normalization with population std.
func DefaultAdvantageConfig() AdvantageConfig {
	return AdvantageConfig{Estimator: EstimatorGroup, Std: "population", Epsilon: 1e-6, Aggregation: "sum", ZeroVariance: "keep"}
}

// Validate checks modes and ranges against the built-in estimators
// (DefaultRegistry).
func (c AdvantageConfig) Validate() error { return c.ValidateWith(DefaultRegistry()) }

// ValidateWith checks modes and ranges, the estimator against reg.
func (c AdvantageConfig) ValidateWith(reg *Registry) error {
	if _, err := reg.AdvantageEstimator(c.Estimator); err != nil {
		return fielderr.New("estimator", "%v", err)
	}
	switch c.Std {
	case "population", "sample":
	default:
		return fielderr.New("std", "must be population or sample, got %q", c.Std)
	}
	if math.IsNaN(c.Epsilon) || math.IsInf(c.Epsilon, 0) || c.Epsilon < 0 {
		return fielderr.New("epsilon", "must be a finite number ≥ 0, got %v", c.Epsilon)
	}
	switch c.Aggregation {
	case "sum", "sum_of_normalized", "normalize_then_sum":
	default:
		return fielderr.New("aggregation", "must be sum, sum_of_normalized or normalize_then_sum, got %q", c.Aggregation)
	}
	switch c.ZeroVariance {
	case "keep", "drop":
	default:
		return fielderr.New("zero_variance", "must be keep or drop, got %q", c.ZeroVariance)
	}
	return nil
}
