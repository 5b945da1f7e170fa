package rlcore

import "math"

// The built-in KL estimators, the values of grpo.loss.kl_estimator (a
// grpo_step's loss.kl_estimator).
const (
	// KLK3 is Schulman's k3 (verl's "low_var_kl" without the clamps, TRL's
	// per-token KL): exp(d) − d − 1 with d = log π_ref − log π (the default).
	KLK3 = "k3"
	// KLLowVar is verl's low_var_kl (core_algos.kl_penalty): k3 of d clamped
	// to [−20, 20], the estimate clamped to [−10, 10].
	KLLowVar = "low_var_kl"
)

// KLEstimator is one token's KL estimate for d = log π_ref − log π (the
// token's reference and current logprobs) and its derivative with respect
// to log π. The loss adds β·kl per token (β = kl_coef), aggregated as the
// loss type says; the trainer reports the mean over tokens.
type KLEstimator func(d float64) (kl, dkl float64)

// K3 (KLK3): exp(d) − d − 1, derivative 1 − exp(d).
func K3(d float64) (kl, dkl float64) {
	return math.Exp(d) - d - 1, 1 - math.Exp(d)
}

// LowVarKL (KLLowVar): d clamped to [−20, 20] and the estimate to
// [−10, 10]; where a clamp bites the derivative is 0, as torch.clamp's is.
func LowVarKL(d float64) (kl, dkl float64) {
	if d < -20 || d > 20 {
		d = min(max(d, -20), 20)
		return min(math.Exp(d)-d-1, 10), 0
	}
	kl = math.Exp(d) - d - 1
	if kl > 10 {
		return 10, 0
	}
	return kl, 1 - math.Exp(d)
}
