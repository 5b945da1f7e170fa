package rlcore

import "github.com/himes-rl/himes/internal/stats"

// The built-in advantage estimators, the values of grpo.advantage.estimator.
const (
	// EstimatorGroup is GRPO's (DeepSeekMath; verl's "grpo", TRL's
	// scale_rewards "group"): A_i = (r_i − m) / (std + ε), std over the
	// group's valid rollouts.
	EstimatorGroup = "group"
	// EstimatorBatch (TRL's scale_rewards "batch"): A_i = (r_i − m) /
	// (std_B + ε), std_B over all valid rollouts of the batch (every group,
	// dropped or not) about the batch mean; the centring stays per group.
	EstimatorBatch = "batch"
	// EstimatorNone is Dr. GRPO's (TRL's scale_rewards "none"): A_i = r_i − m,
	// centred, not scaled.
	EstimatorNone = "none"
	// EstimatorRLOO (verl's "rloo"; Ahmadian et al. 2024): A_i = r_i −
	// (Σ_{j≠i} r_j)/(n−1), the leave-one-out baseline (= n/(n−1)·(r_i − m)).
	EstimatorRLOO = "rloo"
	// EstimatorGreedy is the greedy baseline of self-critical sequence
	// training (Rennie et al. 2017) and ReMax (Li et al. 2023): A_i = r_i −
	// r_greedy, the reward of the group's greedy (temperature 0) rollout,
	// not scaled. A sample is pushed up only when it beats the rewrite the
	// evaluation uses, so the update moves the greedy policy rather than
	// sharpening the samples toward it. It needs each group's greedy
	// rollout (the training loop rolls it out, as grpo.greedy_probe does).
	EstimatorGreedy = "greedy"
)

// EstimatorInput is what an advantage estimator reads besides the group's
// values.
type EstimatorInput struct {
	SampleStd bool    // Bessel-corrected std (grpo.advantage.std "sample")
	Epsilon   float64 // added to the std, never under the square root
	BatchStd  float64 // the quantity's std over the batch; set only for an estimator with UsesBatchStd
	Greedy    float64 // the quantity for the group's greedy rollout; set only for an estimator with UsesGreedy
}

// AdvantageEstimator is one registry entry (Registry.RegisterAdvantageEstimator).
type AdvantageEstimator struct {
	// Fn replaces vals — one reward quantity over one group's valid
	// rollouts, n ≥ 2 and not all equal — by their advantages, in place.
	Fn func(vals []float64, in EstimatorInput)
	// UsesBatchStd: Fn reads EstimatorInput.BatchStd, which ComputeAdvantages
	// then computes over the batch.
	UsesBatchStd bool
	// UsesGreedy: Fn reads EstimatorInput.Greedy, the group's greedy
	// rollout's value (ComputeAdvantagesGreedy). Such an estimator compares
	// each sample with the greedy rollout, not with the other samples: Fn
	// is also called for a group of one valid sample, or of samples that
	// are all equal but differ from the greedy one.
	UsesGreedy bool
}

// GroupAdvantages (EstimatorGroup): (r − m) / (std + ε) with the group's own std.
func GroupAdvantages(vals []float64, in EstimatorInput) {
	m, std := stats.MeanStd(vals, in.SampleStd)
	scale := 1 / (std + in.Epsilon)
	for k, v := range vals {
		vals[k] = (v - m) * scale
	}
}

// BatchAdvantages (EstimatorBatch): (r − m) / (std_B + ε), centred in the
// group, scaled by the batch.
func BatchAdvantages(vals []float64, in EstimatorInput) {
	m, _ := stats.MeanStd(vals, in.SampleStd)
	scale := 1 / (in.BatchStd + in.Epsilon)
	for k, v := range vals {
		vals[k] = (v - m) * scale
	}
}

// CentredAdvantages (EstimatorNone): r − m (Dr. GRPO).
func CentredAdvantages(vals []float64, in EstimatorInput) {
	m, _ := stats.MeanStd(vals, in.SampleStd)
	for k, v := range vals {
		vals[k] = v - m
	}
}

// RLOOAdvantages (EstimatorRLOO): r minus the mean of the group's other rollouts.
func RLOOAdvantages(vals []float64, _ EstimatorInput) {
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	n := float64(len(vals) - 1)
	for k, v := range vals {
		vals[k] = v - (sum-v)/n
	}
}

// GreedyAdvantages (EstimatorGreedy): r minus the group's greedy rollout's r.
func GreedyAdvantages(vals []float64, in EstimatorInput) {
	for k, v := range vals {
		vals[k] = v - in.Greedy
	}
}
