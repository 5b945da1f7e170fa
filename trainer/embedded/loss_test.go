package embedded

import (
	"math"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// resolve is lc with the protocol's defaults, as GRPOStep resolves it.
func resolve(t *testing.T, lc trainer.LossConfig) trainer.ResolvedLoss {
	t.Helper()
	l, err := lc.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func near(t *testing.T, what string, got, want float64) {
	t.Helper()
	if math.Abs(got-want) > 1e-12*max(1, math.Abs(want)) {
		t.Errorf("%s = %.15g, want %.15g", what, got, want)
	}
}

// handBatch has two samples whose ratios r = exp(π − π_old) are chosen so
// that clipping is active on each side (ε_low 0.2, ε_high 0.28):
//
//	sample 0, A = +1, r = [1.0, 1.5]:      per-token losses −1, −1.28 (clipped high, no gradient)
//	sample 1, A = −2, r = [0.5, 1.1, 1.4]: per-token losses 1.6 (clipped low, no gradient), 2.2, 2.8
//
// Token sums: −2.28 over 2 tokens and 6.6 over 3 tokens.
func handBatch() []seqInput {
	old := math.Log(0.5)
	mk := func(adv float64, ratios ...float64) seqInput {
		s := seqInput{adv: adv}
		for _, r := range ratios {
			s.old = append(s.old, old)
			s.logp = append(s.logp, old+math.Log(r))
		}
		return s
	}
	return []seqInput{mk(1, 1.0, 1.5), mk(-2, 0.5, 1.1, 1.4)}
}

func TestGRPOObjectiveAggregations(t *testing.T) {
	cases := []struct {
		typ       string
		maxLength int
		loss      float64
		grads     [][]float64 // dL/dπ: −r·A times the token's aggregation weight, 0 where clipped
	}{
		// (1/B) Σ_i (1/L_i) Σ_t: ½(−2.28/2 + 6.6/3) = 0.53; weights 1/4 and 1/6.
		{trainer.LossGRPO, 0, 0.53, [][]float64{{-1.0 / 4, 0}, {0, 2.2 / 6, 2.8 / 6}}},
		// Σ/ΣL = 4.32/5; weight 1/5.
		{trainer.LossBNPO, 0, 0.864, [][]float64{{-0.2, 0}, {0, 0.44, 0.56}}},
		{trainer.LossDAPO, 0, 0.864, [][]float64{{-0.2, 0}, {0, 0.44, 0.56}}},
		// Σ/(B·L_max), L_max = longest sample = 3: 4.32/6; weight 1/6.
		{trainer.LossDrGRPO, 0, 0.72, [][]float64{{-1.0 / 6, 0}, {0, 2.2 / 6, 2.8 / 6}}},
		// L_max given: 4.32/8; weight 1/8.
		{trainer.LossDrGRPO, 4, 0.54, [][]float64{{-1.0 / 8, 0}, {0, 2.2 / 8, 2.8 / 8}}},
	}
	for _, c := range cases {
		lc := resolve(t, trainer.LossConfig{Type: new(c.typ), ClipLow: new(0.2), ClipHigh: new(0.28), LearningRate: new(1.0), MaxLength: new(c.maxLength)})
		st, grads := grpoObjective(handBatch(), lc)
		near(t, c.typ+" loss", st.loss, c.loss)
		near(t, c.typ+" clip_frac_low", st.clipLow, 0.2)
		near(t, c.typ+" clip_frac_high", st.clipHigh, 0.2)
		near(t, c.typ+" kl", st.kl, 0)
		if st.tokens != 5 {
			t.Errorf("%s tokens = %d, want 5", c.typ, st.tokens)
		}
		for i := range c.grads {
			for j := range c.grads[i] {
				near(t, c.typ+" grad", grads[i][j], c.grads[i][j])
			}
		}
	}
}

func TestGRPOObjectiveSymmetricClipDefault(t *testing.T) {
	// clip_high unset defaults to clip_low: with ε = 0.2 the r = 1.5, A = +1
	// token is clipped at 1.2.
	lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossBNPO), ClipLow: new(0.2), LearningRate: new(1.0)})
	st, _ := grpoObjective(handBatch()[:1], lc)
	near(t, "loss", st.loss, (-1-1.2)/2)
	near(t, "clip_frac_high", st.clipHigh, 0.5)
}

func TestGRPOObjectiveKL(t *testing.T) {
	lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossGRPO), KLCoef: new(0.5), LearningRate: new(1.0)})
	// Policy equal to the reference: k3 = 0 and the KL term adds no gradient.
	s := seqInput{logp: []float64{-0.3, -1.2}, old: []float64{-0.3, -1.2}, ref: []float64{-0.3, -1.2}, adv: 0}
	st, g := grpoObjective([]seqInput{s}, lc)
	near(t, "kl (policy = reference)", st.kl, 0)
	near(t, "loss", st.loss, 0)
	near(t, "grad", g[0][0], 0)

	// π = log ½, π_ref = log ¼: d = −log 2, k3 = e^d − d − 1 = ½ + log 2 − 1;
	// dk3/dπ = 1 − e^d = ½. With A = 0 only the KL term remains.
	s = seqInput{logp: []float64{math.Log(0.5)}, old: []float64{math.Log(0.5)}, ref: []float64{math.Log(0.25)}}
	st, g = grpoObjective([]seqInput{s}, lc)
	k3 := 0.5 + math.Ln2 - 1
	near(t, "kl", st.kl, k3)
	near(t, "loss", st.loss, 0.5*k3)
	near(t, "grad", g[0][0], 0.5*0.5)
}

// With kl_coef 0 the KL is still measured (capabilities.kl_measured) but
// stays out of the loss and its gradient: the same k3 as above, while loss
// and gradient are the clipped surrogate's alone (A = 1, r = 1: loss −1,
// dL/dπ = −r·A = −1).
func TestGRPOObjectiveMeasuresKLOutsideTheLoss(t *testing.T) {
	lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossGRPO), KLCoef: new(0.0), LearningRate: new(1.0)})
	s := seqInput{logp: []float64{math.Log(0.5)}, old: []float64{math.Log(0.5)}, ref: []float64{math.Log(0.25)}, adv: 1}
	st, g := grpoObjective([]seqInput{s}, lc)
	near(t, "kl (measured)", st.kl, 0.5+math.Ln2-1)
	near(t, "loss", st.loss, -1)
	near(t, "grad", g[0][0], -1)
}

func TestGRPOObjectiveEmptySample(t *testing.T) {
	// A sample with no tokens counts in B but adds nothing.
	lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossGRPO), ClipHigh: new(0.28), LearningRate: new(1.0)})
	b := handBatch()[:1] // loss −2.28/2 alone
	st, _ := grpoObjective(append(b, seqInput{adv: 3}), lc)
	near(t, "loss", st.loss, -1.14/2)
}

// TestGRPOObjectiveClipLowZero: clip_low 0 is taken literally, the
// tightest lower clip (every ratio below 1 is clipped): a token with r = 0.9 and A = −1 is inside
// [1 − 0.2, 1.28] (loss 0.9, gradient −r·A = 0.9) but below [1, 1.28], so
// with ε_low = 0 its loss is the clipped 1 and it carries no gradient.
func TestGRPOObjectiveClipLowZero(t *testing.T) {
	old := math.Log(0.5)
	s := seqInput{logp: []float64{old + math.Log(0.9)}, old: []float64{old}, adv: -1}
	for _, c := range []struct {
		clipLow              float64
		loss, grad, clipFrac float64
	}{
		{0.2, 0.9, 0.9, 0},
		{0, 1, 0, 1},
	} {
		lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossGRPO), ClipLow: new(c.clipLow), ClipHigh: new(0.28), LearningRate: new(1.0)})
		if lc.ClipLow != c.clipLow {
			t.Fatalf("clip_low %v resolved to %v", c.clipLow, lc.ClipLow)
		}
		st, g := grpoObjective([]seqInput{s}, lc)
		near(t, "loss", st.loss, c.loss)
		near(t, "grad", g[0][0], c.grad)
		near(t, "clip_frac_low", st.clipLow, c.clipFrac)
	}
}

func TestLogSigmoid(t *testing.T) {
	for _, x := range []float64{-800, -30, -1, 0, 1, 30, 800} {
		want := math.Log(1 / (1 + math.Exp(-x)))
		if x == -800 {
			want = -800 // exp overflows in the naive formula
		}
		near(t, "logσ", logSigmoid(x), want)
		if s := sigmoid(x); s < 0 || s > 1 || math.IsNaN(s) {
			t.Errorf("σ(%v) = %v", x, s)
		}
	}
}

// TestGRPOObjectiveDualClip: verl's dual clip on handBatch (bnpo, weight
// 1/5 per token). With c = 1.3 the A = −2 tokens are capped at −c·A = 2.6:
// the r = 1.4 token's 2.8 becomes 2.6 and loses its gradient; 1.6 and 2.2
// stay. Loss (−2.28 + 1.6 + 2.2 + 2.6)/5 = 0.824, one token of five capped.
// With verl's default c = 3 the cap (6) is never reached.
func TestGRPOObjectiveDualClip(t *testing.T) {
	lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossBNPO), ClipLow: new(0.2), ClipHigh: new(0.28), LearningRate: new(1.0), ClipRatioC: new(1.3)})
	st, g := grpoObjective(handBatch(), lc)
	near(t, "loss", st.loss, 0.824)
	near(t, "clip_frac_dual", st.clipDual, 0.2)
	near(t, "clip_frac_low", st.clipLow, 0.2)
	want := [][]float64{{-0.2, 0}, {0, 0.44, 0}}
	for i := range want {
		for j := range want[i] {
			near(t, "grad", g[i][j], want[i][j])
		}
	}
	lc.ClipRatioC = 3
	st, _ = grpoObjective(handBatch(), lc)
	near(t, "loss (c = 3)", st.loss, 0.864)
	near(t, "clip_frac_dual (c = 3)", st.clipDual, 0)
}

// TestGRPOObjectiveLowVarKL: verl's low_var_kl is k3 where k3 ≤ 10, and 10
// without gradient beyond (d = π_ref − π): d = 2 gives k3 = e² − 3 ≈ 4.39
// (kept, dk3/dπ = 1 − e²); d = 3 gives e³ − 4 ≈ 16.1 and d = −12 gives
// e^−12 + 11 ≈ 11.000006, both clamped to 10; d = 25 is first clamped to 20.
func TestGRPOObjectiveLowVarKL(t *testing.T) {
	for _, c := range []struct {
		d          float64
		kl, grad   float64 // low_var_kl
		k3, k3grad float64
	}{
		{-math.Ln2, 0.5 + math.Ln2 - 1, 0.5, 0.5 + math.Ln2 - 1, 0.5},
		{2, math.Exp(2) - 3, 1 - math.Exp(2), math.Exp(2) - 3, 1 - math.Exp(2)},
		{3, 10, 0, math.Exp(3) - 4, 1 - math.Exp(3)},
		{-12, 10, 0, math.Exp(-12) + 11, 1 - math.Exp(-12)},
		{25, 10, 0, math.Exp(25) - 26, 1 - math.Exp(25)},
	} {
		for _, given := range []*string{new(trainer.KLLowVar), new(trainer.KLK3), nil} { // nil: the default, k3
			lc := resolve(t, trainer.LossConfig{Type: new(trainer.LossGRPO), KLCoef: new(0.5), LearningRate: new(1.0), KLEstimator: given})
			est := lc.KLEstimator
			// A = 0: only the KL term; π = log ½, π_ref = π + d.
			lp := math.Log(0.5)
			s := seqInput{logp: []float64{lp}, old: []float64{lp}, ref: []float64{lp + c.d}}
			st, g := grpoObjective([]seqInput{s}, lc)
			kl, grad := c.k3, c.k3grad
			if est == trainer.KLLowVar {
				kl, grad = c.kl, c.grad
			}
			near(t, est+" kl", st.kl, kl)
			near(t, est+" loss", st.loss, 0.5*kl)
			near(t, est+" grad", g[0][0], 0.5*grad)
		}
	}
}
