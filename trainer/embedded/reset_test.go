package embedded

import (
	"context"
	"errors"
	"math"
	"testing"

	"github.com/himes-rl/himes/trainer"
)

// firstGRPOStep takes one grpo_step (μ = 1, no KL, lr) on bronze() with
// fixed decisions and advantage +1, old logprobs those of the current
// policy, and returns how far each weight moved.
func firstGRPOStep(t *testing.T, e *Policy, stepID string, lr float64, reset bool) []float64 {
	t.Helper()
	ctx := context.Background()
	ids := []int{1, 0, 1, 1, 0, 0, 1, 0, 1, 0}
	lp, err := e.Logprobs(ctx, trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: bronze(), TokenIDs: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	before := clone(e.st.w)
	if _, err := e.GRPOStep(ctx, trainer.GRPORequest{StepID: stepID, ResetOptimizer: reset,
		Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: ids, OldLogprobs: lp.Logprobs[0], Advantage: 1}},
		Loss:    trainer.LossConfig{LearningRate: new(lr), KLCoef: new(0.0)}}); err != nil {
		t.Fatal(err)
	}
	d := make([]float64, len(before))
	for k := range d {
		d[k] = e.st.w[k] - before[k]
	}
	return d
}

// TestOptimizerResetGivesAFreshFirstStep: Adam's first step from fresh
// moments moves every weight with a gradient by lr·g/(|g| + ε), i.e. by lr
// up to sign. A fresh policy takes that step; so does one that did SFT first
// when the grpo_step resets the optimizer; without the reset SFT's moments
// make the step another size.
func TestOptimizerResetGivesAFreshFirstStep(t *testing.T) {
	const lr = 0.01
	sft := func(e *Policy) {
		for k := range 5 {
			if _, err := e.SFTStep(context.Background(), trainer.SFTRequest{StepID: "sft-" + string(rune('0'+k)), Examples: sftBatch(), LearningRate: 0.05}); err != nil {
				t.Fatal(err)
			}
		}
	}
	// moved checks the hand-computed size: |Δw_k| = lr (to Adam's ε) for a
	// weight with a gradient, 0 for one without; it returns how many moved.
	moved := func(name string, d []float64) int {
		n := 0
		for k, x := range d {
			switch {
			case x == 0:
			case math.Abs(math.Abs(x)-lr) < 1e-6*lr:
				n++
			default:
				t.Errorf("%s: weight %d moved %v, want ±%v or 0", name, k, x, lr)
			}
		}
		return n
	}

	fresh := newTestEmbedded(t, nil)
	nFresh := moved("fresh, reset", firstGRPOStep(t, fresh, "g1", lr, true))
	freshNoReset := newTestEmbedded(t, nil)
	if n := moved("fresh, no reset", firstGRPOStep(t, freshNoReset, "g1", lr, false)); n != nFresh {
		t.Errorf("a fresh policy moved %d weights with the reset and %d without: a reset of fresh moments must change nothing", nFresh, n)
	}
	if nFresh < 5 {
		t.Fatalf("only %d weights moved: the test sample has too few features", nFresh)
	}

	afterSFT := newTestEmbedded(t, nil)
	sft(afterSFT)
	// Which weights have a gradient depends on the weights (at w = 0 the
	// bias's cancels: 5 keeps, 5 drops at p = ½); each that moves, moves lr.
	if n := moved("SFT, reset", firstGRPOStep(t, afterSFT, "g1", lr, true)); n < 5 {
		t.Errorf("after SFT the reset step moved only %d weights", n)
	}
	if afterSFT.st.t != 1 {
		t.Errorf("Adam's t after the reset step is %d, want 1", afterSFT.st.t)
	}

	carried := newTestEmbedded(t, nil)
	sft(carried)
	d := firstGRPOStep(t, carried, "g1", lr, false)
	other := 0
	for _, x := range d {
		if x != 0 && math.Abs(math.Abs(x)-lr) > 0.01*lr {
			other++
		}
	}
	if other == 0 {
		t.Errorf("without the reset, the step after SFT still moved every weight by lr: SFT's moments did not carry over")
	}
}

// TestOptimizerResetReplayAndConflict: a replayed reset step is not applied
// (nor reset) again, and the same step_id with another reset_optimizer is a
// conflict.
func TestOptimizerResetReplayAndConflict(t *testing.T) {
	e := newTestEmbedded(t, nil)
	if _, err := e.SFTStep(context.Background(), trainer.SFTRequest{StepID: "sft", Examples: sftBatch(), LearningRate: 0.05}); err != nil {
		t.Fatal(err)
	}
	ids := []int{1, 0, 1, 1, 0, 0, 1, 0, 1, 0}
	lp, err := e.Logprobs(context.Background(), trainer.LogprobsRequest{Items: []trainer.LogprobsItem{{Prompt: bronze(), TokenIDs: ids}}})
	if err != nil {
		t.Fatal(err)
	}
	req := trainer.GRPORequest{StepID: "g1", ResetOptimizer: true,
		Samples: []trainer.GRPOSample{{Prompt: bronze(), TokenIDs: ids, OldLogprobs: lp.Logprobs[0], Advantage: 1}},
		Loss:    trainer.LossConfig{LearningRate: new(0.01)}}
	if _, err := e.GRPOStep(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	st := e.st.clone()
	r, err := e.GRPOStep(context.Background(), req)
	if err != nil || !r.Replayed {
		t.Fatalf("replay: %+v, %v", r, err)
	}
	if e.st.t != st.t || e.st.version != st.version || e.st.m[0] != st.m[0] {
		t.Errorf("the replay changed the state: t %d → %d, version %d → %d", st.t, e.st.t, st.version, e.st.version)
	}
	req.ResetOptimizer = false
	_, err = e.GRPOStep(context.Background(), req)
	var te *trainer.Error
	if !errors.As(err, &te) || te.Code != trainer.CodeConflict {
		t.Errorf("the same step_id without the reset: %v, want a conflict", err)
	}
}
