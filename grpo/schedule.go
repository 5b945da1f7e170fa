package grpo

import (
	"math"

	"github.com/himes-rl/himes/internal/fielderr"
)

// OptimizerConfig is the learning-rate schedule and weight decay of the
// policy updates. The harness computes each GRPO step's learning rate and
// sends it as the call's learning_rate (trainer/PROTOCOL.md), so every
// endpoint follows the schedule and a resumed run continues it exactly.
type OptimizerConfig struct {
	// Schedule of the GRPO learning rate over grpo.steps after the warmup:
	// constant, linear (down to min_lr_ratio × learning_rate) or cosine
	// (half a cosine down to min_lr_ratio × learning_rate), as Hugging
	// Face's get_{constant,linear,cosine}_schedule_with_warmup.
	Schedule string `yaml:"schedule"`
	// WarmupSteps ramp the learning rate up linearly: GRPO step s ≤
	// warmup_steps uses learning_rate × s / warmup_steps (step 1 is not 0).
	// More than grpo.steps is cut to grpo.steps (the last step is at the peak).
	WarmupSteps int `yaml:"warmup_steps"`
	// MinLRRatio is where linear and cosine decay end, as a fraction of
	// learning_rate (0: towards 0, never reached).
	MinLRRatio float64 `yaml:"min_lr_ratio"`
	// WeightDecay is AdamW's decoupled λ (w ← w − lr·λ·w each optimizer
	// step) of the SFT and GRPO updates; 0 leaves the endpoint's default (none
	// for the embedded policy). > 0 needs an endpoint with
	// capabilities.weight_decay.
	WeightDecay float64 `yaml:"weight_decay"`
	// Reset starts GRPO with a fresh optimizer after SFT: the first GRPO
	// step of a run that did SFT carries reset_optimizer, so the trainer
	// discards SFT's Adam moments (sized to SFT's gradients, they make RL's
	// steps several times smaller than configured). Needs an endpoint with
	// capabilities.optimizer_reset when SFT runs; no effect without SFT.
	Reset bool `yaml:"reset"`
}

// DefaultOptimizerConfig is a constant learning rate without weight decay,
// and a fresh optimizer for GRPO after SFT.
func DefaultOptimizerConfig() OptimizerConfig {
	return OptimizerConfig{Schedule: "constant", Reset: true}
}

func (o OptimizerConfig) validate(steps int) error {
	switch o.Schedule {
	case "constant", "linear", "cosine":
	default:
		return fielderr.New("schedule", "must be constant, linear or cosine, got %q", o.Schedule)
	}
	switch {
	case o.WarmupSteps < 0:
		return fielderr.New("warmup_steps", "must be ≥ 0, got %d", o.WarmupSteps)
	case !(o.MinLRRatio >= 0 && o.MinLRRatio <= 1):
		return fielderr.New("min_lr_ratio", "must be in [0, 1], got %v", o.MinLRRatio)
	case !(o.WeightDecay >= 0) || math.IsInf(o.WeightDecay, 0):
		return fielderr.New("weight_decay", "must be ≥ 0, got %v", o.WeightDecay)
	}
	return nil
}

// LearningRate is the learning rate of GRPO step (1-based) of steps, for
// peak learning rate lr. With k = step − 1 and W warmup steps: k < W gives
// lr·(k+1)/W; after it, progress p = (k − W)/max(1, steps − W) ∈ [0, 1)
// decays lr·(r + (1 − r)·f(p)) with f = 1 (constant), 1 − p (linear) or
// ½(1 + cos πp) (cosine) and r = min_lr_ratio. Every value is > 0.
func (o OptimizerConfig) LearningRate(lr float64, step, steps int) float64 {
	k, w := step-1, o.WarmupSteps
	// A run shorter than the warmup (the quickstart's 10 steps under
	// --set grpo.steps=2) warms up over all its steps and reaches the peak.
	if steps > 0 && w > steps {
		w = steps
	}
	if k < w {
		return lr * float64(k+1) / float64(w)
	}
	p := float64(k-w) / float64(max(1, steps-w))
	p = min(max(p, 0), 1)
	r := o.MinLRRatio
	switch o.Schedule {
	case "linear":
		return lr * (r + (1-r)*(1-p))
	case "cosine":
		return lr * (r + (1-r)*0.5*(1+math.Cos(math.Pi*p)))
	}
	return lr
}
