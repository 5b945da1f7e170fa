package trainer

import (
	"fmt"
	"slices"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
)

// LossConfig is the loss of a grpo_step (PROTOCOL.md, "LossConfig"): the
// request's loss object and the run config's grpo.loss section. A nil field
// is unset (absent or null, in a request's JSON or in YAML) and takes its
// documented default (WithDefaults); a set field is taken literally, 0
// included. Resolve applies the defaults and validates; the Go client sends
// every field set.
type LossConfig struct {
	// Type: grpo (per-sequence token mean), bnpo / dapo (token sum over the
	// batch's tokens), dr_grpo (token sum over B × max length).
	Type *string `json:"type" yaml:"type"`
	// ClipLow is PPO's ε below ratio 1, in [0, 1); 0 is no lower clipping.
	ClipLow *float64 `json:"clip_low" yaml:"clip_low"`
	// ClipHigh is ε above ratio 1 (DAPO's clip-higher when above ClipLow), ≥ 0.
	ClipHigh *float64 `json:"clip_high" yaml:"clip_high"`
	// KLCoef is β of the KL penalty against the reference policy; 0 disables it.
	KLCoef *float64 `json:"kl_coef" yaml:"kl_coef"`
	// KLEstimator: "k3" (exp(d) − d − 1 with d = π_ref − π, the default) or
	// "low_var_kl" (verl's: d clamped to [−20, 20], the estimate to [−10, 10]).
	KLEstimator *string `json:"kl_estimator" yaml:"kl_estimator"`
	// ClipRatioC is dual-clip PPO's c for negative advantages (verl's
	// clip_ratio_c, 3 by default there): a token's loss is capped at −c·A.
	// 0 (the default) disables it; otherwise it must be > 1.
	ClipRatioC *float64 `json:"clip_ratio_c" yaml:"clip_ratio_c"`
	// Mu is the number of update iterations per batch (≥ 1).
	Mu *int `json:"mu" yaml:"mu"`
	// MaxGradNorm clips the gradient's global norm (0 disables).
	MaxGradNorm *float64 `json:"max_grad_norm" yaml:"max_grad_norm"`

	// The harness sets the rest per step from other grpo keys (learning_rate
	// and its schedule, optimizer.weight_decay, max_tokens, temperature);
	// they are not grpo.loss keys.

	// LearningRate is the step size of this call (required, > 0).
	LearningRate *float64 `json:"learning_rate" yaml:"-"`
	// WeightDecay is AdamW's decoupled λ (≥ 0), as in SFTRequest.
	WeightDecay *float64 `json:"weight_decay" yaml:"-"`
	// MaxLength is dr_grpo's L_max; 0 is the longest sample of the request.
	MaxLength *int `json:"max_length" yaml:"-"`
	// Temperature is the temperature the samples' logprobs were computed at
	// (> 0; samples drawn at temperature 0 have logprobs under T = 1), so
	// that the new logprobs are computed like the old ones.
	Temperature *float64 `json:"temperature" yaml:"-"`
}

// ResolvedLoss is a LossConfig with every default applied and every value
// validated: the loss an endpoint applies.
type ResolvedLoss struct {
	Type                      string
	ClipLow, ClipHigh, KLCoef float64
	KLEstimator               string
	ClipRatioC                float64
	Mu                        int
	MaxGradNorm, LearningRate float64
	WeightDecay               float64
	MaxLength                 int
	Temperature               float64
}

// WithDefaults returns lc with each unset field at the protocol's documented
// default (PROTOCOL.md, "LossConfig"): the one place those defaults live.
// learning_rate has none (it is required) and stays unset.
func (lc LossConfig) WithDefaults() LossConfig {
	orDefault(&lc.Type, LossGRPO)
	orDefault(&lc.ClipLow, 0.2)
	orDefault(&lc.ClipHigh, *lc.ClipLow)
	orDefault(&lc.KLCoef, 0)
	orDefault(&lc.KLEstimator, KLK3)
	orDefault(&lc.ClipRatioC, 0) // no dual clip
	orDefault(&lc.Mu, 1)
	orDefault(&lc.MaxGradNorm, 0) // no clipping
	orDefault(&lc.WeightDecay, 0)
	orDefault(&lc.MaxLength, 0) // the longest sample
	orDefault(&lc.Temperature, 1)
	return lc
}

func orDefault[T any](p **T, v T) {
	if *p == nil {
		*p = &v
	}
}

// Resolve applies the defaults (WithDefaults) and validates every value. An
// invalid one is an invalid_argument error (unknown_loss_type for the type)
// whose message names the field, "loss.clip_low: …"; it wraps a
// fielderr.Error, so that a config error points at grpo.loss's key.
func (lc LossConfig) Resolve() (ResolvedLoss, error) {
	d := lc.WithDefaults()
	if !slices.Contains(LossTypes(), *d.Type) {
		types := strings.Join(LossTypes(), ", ")
		return ResolvedLoss{}, &Error{Code: CodeUnknownLossType,
			Message: fmt.Sprintf("unknown loss type '%s' (supported: %s)", *d.Type, types),
			cause:   &fielderr.Error{Field: "type", Msg: fmt.Sprintf("must be one of %s, got %q", types, *d.Type)}}
	}
	if d.LearningRate == nil {
		return ResolvedLoss{}, lossErr("learning_rate", "is required")
	}
	l := ResolvedLoss{
		Type: *d.Type, ClipLow: *d.ClipLow, ClipHigh: *d.ClipHigh, KLCoef: *d.KLCoef, KLEstimator: *d.KLEstimator,
		ClipRatioC: *d.ClipRatioC, Mu: *d.Mu, MaxGradNorm: *d.MaxGradNorm, LearningRate: *d.LearningRate,
		WeightDecay: *d.WeightDecay, MaxLength: *d.MaxLength, Temperature: *d.Temperature,
	}
	switch {
	case !finite(l.ClipLow) || l.ClipLow < 0 || l.ClipLow >= 1:
		return ResolvedLoss{}, lossErr("clip_low", "must be in [0, 1), got %v", l.ClipLow)
	case !finite(l.ClipHigh) || l.ClipHigh < 0:
		return ResolvedLoss{}, lossErr("clip_high", "must be ≥ 0, got %v", l.ClipHigh)
	case !finite(l.KLCoef) || l.KLCoef < 0:
		return ResolvedLoss{}, lossErr("kl_coef", "must be ≥ 0, got %v", l.KLCoef)
	case !slices.Contains(KLEstimators(), l.KLEstimator):
		return ResolvedLoss{}, lossErr("kl_estimator", "must be k3 or low_var_kl, got %q", l.KLEstimator)
	case !finite(l.ClipRatioC) || l.ClipRatioC != 0 && l.ClipRatioC <= 1:
		return ResolvedLoss{}, lossErr("clip_ratio_c", "must be > 1 (dual-clip PPO) or 0 (none), got %v", l.ClipRatioC)
	case l.Mu < 1:
		return ResolvedLoss{}, lossErr("mu", "must be ≥ 1, got %d", l.Mu)
	case !finite(l.MaxGradNorm) || l.MaxGradNorm < 0:
		return ResolvedLoss{}, lossErr("max_grad_norm", "must be ≥ 0 (0 disables clipping), got %v", l.MaxGradNorm)
	case !finite(l.LearningRate) || l.LearningRate <= 0:
		return ResolvedLoss{}, lossErr("learning_rate", "must be > 0, got %v", l.LearningRate)
	case !finite(l.WeightDecay) || l.WeightDecay < 0:
		return ResolvedLoss{}, lossErr("weight_decay", "must be ≥ 0, got %v", l.WeightDecay)
	case l.MaxLength < 0:
		return ResolvedLoss{}, lossErr("max_length", "must be ≥ 0 (0 is the longest sample), got %d", l.MaxLength)
	case !finite(l.Temperature) || l.Temperature <= 0:
		return ResolvedLoss{}, lossErr("temperature", "must be > 0, got %v", l.Temperature)
	}
	return l, nil
}

// lossErr is an invalid_argument error naming loss.FIELD.
func lossErr(field, format string, args ...any) *Error {
	fe := &fielderr.Error{Field: field, Msg: fmt.Sprintf(format, args...)}
	return &Error{Code: CodeInvalidArgument, Message: "loss." + fe.Error(), cause: fe}
}

// Config returns l with every field set: what the Go client sends.
func (l ResolvedLoss) Config() LossConfig {
	return LossConfig{
		Type: &l.Type, ClipLow: &l.ClipLow, ClipHigh: &l.ClipHigh, KLCoef: &l.KLCoef, KLEstimator: &l.KLEstimator,
		ClipRatioC: &l.ClipRatioC, Mu: &l.Mu, MaxGradNorm: &l.MaxGradNorm, LearningRate: &l.LearningRate,
		WeightDecay: &l.WeightDecay, MaxLength: &l.MaxLength, Temperature: &l.Temperature,
	}
}
