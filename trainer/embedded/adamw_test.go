package embedded

import (
	"context"
	"math"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// With a zero gradient (advantage 0, no KL) an AdamW step moves only by the
// decoupled decay: after μ = 2 iterations w = w0·(1 − lr·λ)², by hand.
func TestWeightDecayAloneShrinksWeights(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	w0 := []float64{-0.3, 0.4, 0.2, 0.7, 0.5, -0.2, 0.3, 0.1, 0.6, -0.4, 0.05, 0.15, -0.25, 0.35, -0.45, 0.55, -0.1, 0.2, -0.3, 0.4, 0.3}
	e.st.w = append([]float64(nil), w0...)
	res, _ := e.Sample(ctx, trainer.SampleRequest{Prompts: []trainer.Prompt{bronze()}, Temperature: 1, Seed: 3})
	s := res.Samples[0]
	const lr, wd = 0.01, 0.5
	if _, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: "wd", Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: s.TokenIDs, OldLogprobs: s.Logprobs}},
		Loss: trainer.LossConfig{Type: new(trainer.LossGRPO), LearningRate: new(lr), WeightDecay: new(wd), Mu: new(2)}}); err != nil {
		t.Fatal(err)
	}
	for k, w := range e.Weights() {
		if want := w0[k] * (1 - lr*wd) * (1 - lr*wd); math.Abs(w-want) > 1e-15 {
			t.Errorf("w[%d] = %v, want %v·(1 − %v·%v)² = %v", k, w, w0[k], lr, wd, want)
		}
	}
}

// The first AdamW step from zero moments: m̂ = g, v̂ = g², so the Adam part
// is lr·g/(|g| + ε) (≈ lr·sign g), and the decay subtracts lr·λ·w0 on top of
// it, independently of the gradient (decoupled, not L2 added to g).
func TestFirstAdamWStepByHand(t *testing.T) {
	ctx := context.Background()
	w0 := []float64{-0.3, 0.4, 0.2, 0.7, 0.5, -0.2, 0.3, 0.1, 0.6, -0.4, 0.05, 0.15, -0.25, 0.35, -0.45, 0.55, -0.1, 0.2, -0.3, 0.4, 0.3}
	const lr, wd = 0.05, 0.1
	step := func(decay float64) []float64 {
		e := newTestEmbedded(t, nil)
		e.st.w = append([]float64(nil), w0...)
		if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "s", Examples: sftBatch(), LearningRate: lr, WeightDecay: decay}); err != nil {
			t.Fatal(err)
		}
		return e.Weights()
	}
	adam, adamw := step(0), step(wd)
	moved := 0
	for k := range w0 {
		d := w0[k] - adam[k] // lr·g/(|g|+ε)
		switch {
		case d == 0: // a feature that is 0 on every candidate: no gradient
		case math.Abs(math.Abs(d)-lr) < lr*1e-4: // ε/|g| below 1e-4
			moved++
		default:
			t.Errorf("w[%d]: Adam's first step moved it by %v, want ±lr = %v", k, d, lr)
		}
		if want := w0[k]*(1-lr*wd) - d; math.Abs(adamw[k]-want) > 1e-15 {
			t.Errorf("w[%d]: AdamW gives %v, want w0·(1 − lr·λ) − (Adam step) = %v", k, adamw[k], want)
		}
	}
	if moved < 5 {
		t.Errorf("only %d weights had a gradient", moved)
	}
}

// weight_decay is part of a request's identity: the same step_id with another
// decay is a conflict, not a replay of the first call.
func TestWeightDecayInStepIdentity(t *testing.T) {
	ctx := context.Background()
	e := newTestEmbedded(t, nil)
	if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "x", Examples: sftBatch(), LearningRate: 0.01}); err != nil {
		t.Fatal(err)
	}
	_, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "x", Examples: sftBatch(), LearningRate: 0.01, WeightDecay: 0.1})
	if trainer.ErrorCode(err) != trainer.CodeConflict {
		t.Fatalf("got %v, want a conflict", err)
	}
	if _, err := e.SFTStep(ctx, trainer.SFTRequest{StepID: "y", Examples: sftBatch(), LearningRate: 0.01, WeightDecay: -1}); trainer.ErrorCode(err) != trainer.CodeInvalidArgument {
		t.Fatalf("negative weight_decay: got %v, want invalid_argument", err)
	}
}
