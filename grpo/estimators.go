package grpo

import "github.com/himes-rl/himes/internal/stats"

// Advantage estimators, the values of grpo.advantage.estimator. Each is one
// small function in the estimators registry (as verl's core_algos registers
// its advantage estimators by name).
const (
	// EstimatorGroup is GRPO's: A_i = (r_i − m) / (std + ε), std over the
	// group's valid rollouts.
	EstimatorGroup = "group"
	// EstimatorBatch: A_i = (r_i − m) / (std_B + ε), std_B over all valid
	// rollouts of the batch (every group, dropped or not) about the batch
	// mean; the centring stays per group.
	EstimatorBatch = "batch"
	// EstimatorNone is Dr. GRPO's: A_i = r_i − m, centred, not scaled.
	EstimatorNone = "none"
	// EstimatorRLOO: A_i = r_i − (Σ_{j≠i} r_j)/(n−1), the leave-one-out
	// baseline (= n/(n−1)·(r_i − m)).
	EstimatorRLOO = "rloo"
)

// estimatorInput is what an estimator reads besides the group's values.
type estimatorInput struct {
	sampleStd bool    // Bessel-corrected std (grpo.advantage.std "sample")
	epsilon   float64 // added to the std, never under the square root
	batchStd  float64 // the quantity's std over the batch (EstimatorBatch)
}

// estimator is one registry entry.
type estimator struct {
	// advantages replaces the values of one reward quantity over a group's
	// valid rollouts (n ≥ 2, not all equal) by their advantages.
	advantages func(vals []float64, in estimatorInput)
	// usesBatchStd: the estimator reads estimatorInput.batchStd.
	usesBatchStd bool
}

// estimators is the registry, by grpo.advantage.estimator value; never
// written after initialization.
var estimators = map[string]estimator{
	EstimatorGroup: {advantages: groupAdvantages},
	EstimatorBatch: {advantages: batchAdvantages, usesBatchStd: true},
	EstimatorNone:  {advantages: centredAdvantages},
	EstimatorRLOO:  {advantages: rlooAdvantages},
}

// groupAdvantages: (r − m) / (std + ε) with the group's own std.
func groupAdvantages(vals []float64, in estimatorInput) {
	m, std := stats.MeanStd(vals, in.sampleStd)
	scale := 1 / (std + in.epsilon)
	for k, v := range vals {
		vals[k] = (v - m) * scale
	}
}

// batchAdvantages: (r − m) / (std_B + ε), centred in the group, scaled by
// the batch.
func batchAdvantages(vals []float64, in estimatorInput) {
	m, _ := stats.MeanStd(vals, in.sampleStd)
	scale := 1 / (in.batchStd + in.epsilon)
	for k, v := range vals {
		vals[k] = (v - m) * scale
	}
}

// centredAdvantages: r − m (Dr. GRPO).
func centredAdvantages(vals []float64, in estimatorInput) {
	m, _ := stats.MeanStd(vals, in.sampleStd)
	for k, v := range vals {
		vals[k] = v - m
	}
}

// rlooAdvantages: r minus the mean of the group's other rollouts.
func rlooAdvantages(vals []float64, _ estimatorInput) {
	sum := 0.0
	for _, v := range vals {
		sum += v
	}
	n := float64(len(vals) - 1)
	for k, v := range vals {
		vals[k] = v - (sum-v)/n
	}
}
