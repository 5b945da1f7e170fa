package embedded

import (
	"math"

	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/trainer"
)

// seqInput is one sample's per-token inputs to the GRPO objective.
type seqInput struct {
	logp []float64 // π under the current weights
	old  []float64 // π_old, from the sampler
	ref  []float64 // π_ref; nil when the KL is not measured
	adv  float64
}

// lossStats are the objective and its metrics for one forward pass.
type lossStats struct {
	loss, kl, clipLow, clipHigh, clipDual float64
	tokens                                int
}

// grpoObjective evaluates the clipped surrogate (dual-clipped for negative
// advantages when lc.ClipRatioC > 0) with the KL estimator lc.KLEstimator
// names in rlcore's registry (k3 or low_var_kl), aggregated as lc.Type says
// (PROTOCOL.md), and returns it with dL/dπ for every token. lc is resolved,
// so its estimator is registered.
func grpoObjective(seqs []seqInput, lc trainer.ResolvedLoss) (lossStats, [][]float64) {
	klTerm, err := rlcore.DefaultRegistry().KLEstimator(lc.KLEstimator)
	if err != nil {
		panic("embedded: unresolved loss: " + err.Error()) // Resolve checked it
	}
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
				kl, dkl := klTerm(s.ref[t] - lp)
				klSum += kl
				// Measured always, in the loss only with a coefficient.
				if lc.KLCoef > 0 {
					l += lc.KLCoef * kl
					dl += lc.KLCoef * dkl
				}
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
