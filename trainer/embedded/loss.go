package embedded

import (
	"math"
	"slices"

	"github.com/himes-rl/himes/trainer"
)

// seqInput is one sample's per-token inputs to the GRPO objective.
type seqInput struct {
	logp []float64 // π under the current weights
	old  []float64 // π_old, from the sampler
	ref  []float64 // π_ref; nil when β = 0
	adv  float64
}

// lossStats are the objective and its metrics for one forward pass.
type lossStats struct {
	loss, kl, clipLow, clipHigh, clipDual float64
	tokens                                int
}

// lossTypes are the loss aggregations the embedded policy implements: all of
// the protocol's.
var lossTypes = trainer.LossTypes()

// klEstimators are the KL estimators the embedded policy implements.
var klEstimators = trainer.KLEstimators()

// normalizeLoss validates lc and fills the documented defaults.
func normalizeLoss(lc trainer.LossConfig) (trainer.LossConfig, *trainer.Error) {
	if !slices.Contains(lossTypes, lc.Type) {
		return lc, trainer.NewError(trainer.CodeUnknownLossType, "unknown loss type '%s' (supported: grpo, bnpo, dapo, dr_grpo)", lc.Type)
	}
	if lc.ClipLow == 0 {
		lc.ClipLow = 0.2
	}
	if lc.ClipHigh == 0 {
		lc.ClipHigh = lc.ClipLow
	}
	if lc.Mu == 0 {
		lc.Mu = 1
	}
	if lc.Temperature == 0 {
		lc.Temperature = 1
	}
	if lc.KLEstimator == "" {
		lc.KLEstimator = trainer.KLK3
	}
	switch {
	case !slices.Contains(klEstimators, lc.KLEstimator):
		return lc, trainer.Invalidf("loss.kl_estimator: must be k3 or low_var_kl, got %q", lc.KLEstimator)
	case !finite(lc.ClipRatioC) || lc.ClipRatioC != 0 && lc.ClipRatioC <= 1:
		return lc, trainer.Invalidf("loss.clip_ratio_c: must be > 1 (dual-clip PPO) or 0 (none), got %v", lc.ClipRatioC)
	case !finite(lc.ClipLow) || lc.ClipLow < 0 || lc.ClipLow >= 1:
		return lc, trainer.Invalidf("loss.clip_low: must be in [0, 1), got %v", lc.ClipLow)
	case !finite(lc.ClipHigh) || lc.ClipHigh < 0:
		return lc, trainer.Invalidf("loss.clip_high: must be ≥ 0, got %v", lc.ClipHigh)
	case !finite(lc.KLCoef) || lc.KLCoef < 0:
		return lc, trainer.Invalidf("loss.kl_coef: must be ≥ 0, got %v", lc.KLCoef)
	case lc.Mu < 0:
		return lc, trainer.Invalidf("loss.mu: must be ≥ 1, got %d", lc.Mu)
	case !finite(lc.LearningRate) || lc.LearningRate <= 0:
		return lc, trainer.Invalidf("loss.learning_rate: must be > 0, got %v", lc.LearningRate)
	case !finite(lc.MaxGradNorm) || lc.MaxGradNorm < 0:
		return lc, trainer.Invalidf("loss.max_grad_norm: must be ≥ 0, got %v", lc.MaxGradNorm)
	case !finite(lc.WeightDecay) || lc.WeightDecay < 0:
		return lc, trainer.Invalidf("loss.weight_decay: must be ≥ 0, got %v", lc.WeightDecay)
	case lc.MaxLength < 0:
		return lc, trainer.Invalidf("loss.max_length: must be ≥ 0, got %d", lc.MaxLength)
	case !finite(lc.Temperature) || lc.Temperature < 0:
		return lc, trainer.Invalidf("loss.temperature: must be > 0, got %v", lc.Temperature)
	}
	return lc, nil
}

// grpoObjective evaluates the clipped surrogate (dual-clipped for negative
// advantages when lc.ClipRatioC > 0) with the k3 or low_var_kl KL,
// aggregated as lc.Type says (PROTOCOL.md), and returns it with dL/dπ for
// every token. lc must be normalized.
func grpoObjective(seqs []seqInput, lc trainer.LossConfig) (lossStats, [][]float64) {
	var st lossStats
	maxLen := 0
	for _, s := range seqs {
		st.tokens += len(s.logp)
		maxLen = max(maxLen, len(s.logp))
	}
	if lc.MaxLength > 0 {
		maxLen = lc.MaxLength
	}
	b := float64(len(seqs))
	grads := make([][]float64, len(seqs))
	var klSum, nLow, nHigh, nDual float64
	for i, s := range seqs {
		// c is the weight of each of this sample's tokens in the aggregate.
		var c float64
		switch lc.Type {
		case trainer.LossGRPO:
			c = 1 / (b * float64(max(len(s.logp), 1)))
		case trainer.LossBNPO, trainer.LossDAPO:
			c = 1 / float64(max(st.tokens, 1))
		case trainer.LossDrGRPO:
			c = 1 / (b * float64(max(maxLen, 1)))
		}
		g := make([]float64, len(s.logp))
		for t, lp := range s.logp {
			r := math.Exp(lp - s.old[t])
			clipped := min(max(r, 1-lc.ClipLow), 1+lc.ClipHigh)
			unc, clp := r*s.adv, clipped*s.adv
			var l, dl float64
			if unc <= clp {
				l, dl = -unc, -r*s.adv
			} else {
				// The clipped term is smaller, so r is outside the range
				// and the token carries no gradient.
				l = -clp
			}
			if c := lc.ClipRatioC; c > 0 && s.adv < 0 && l > -c*s.adv {
				// Dual clip (verl): min(l, −c·A) caps the loss of a
				// negative-advantage token whose ratio ran away; the cap
				// is constant, so the token carries no gradient.
				l, dl = -c*s.adv, 0
				nDual++
			}
			if r < 1-lc.ClipLow && s.adv < 0 {
				nLow++
			}
			if r > 1+lc.ClipHigh && s.adv > 0 {
				nHigh++
			}
			if s.ref != nil {
				kl, dkl := klTerm(s.ref[t]-lp, lc.KLEstimator)
				klSum += kl
				l += lc.KLCoef * kl
				dl += lc.KLCoef * dkl
			}
			st.loss += c * l
			g[t] = c * dl
		}
		grads[i] = g
	}
	if st.tokens > 0 {
		n := float64(st.tokens)
		st.kl, st.clipLow, st.clipHigh, st.clipDual = klSum/n, nLow/n, nHigh/n, nDual/n
	}
	return st, grads
}

// klTerm is one token's KL estimate for d = π_ref − π and its derivative
// with respect to π. k3: exp(d) − d − 1. low_var_kl (verl's kl_penalty):
// d clamped to [−20, 20] and the estimate to [−10, 10]; where a clamp bites
// the derivative is 0, as torch.clamp's is.
func klTerm(d float64, estimator string) (kl, dkl float64) {
	if estimator != trainer.KLLowVar {
		return math.Exp(d) - d - 1, 1 - math.Exp(d)
	}
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

// logSigmoid returns log σ(x) without overflow.
func logSigmoid(x float64) float64 {
	if x >= 0 {
		return -math.Log1p(math.Exp(-x))
	}
	return x - math.Log1p(math.Exp(x))
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func sigmoid(x float64) float64 {
	if x >= 0 {
		return 1 / (1 + math.Exp(-x))
	}
	e := math.Exp(x)
	return e / (1 + e)
}
