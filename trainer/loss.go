package trainer

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/rlcore"
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
	// ClipLow is PPO's ε_low, in [0, 1): a ratio below 1 − ClipLow is
	// clipped. 0 is the tightest clip, not none: every ratio below 1 is
	// clipped (the conformance check clip_low_zero asserts it).
	ClipLow *float64 `json:"clip_low" yaml:"clip_low"`
	// ClipHigh is ε_high, ≥ 0: a ratio above 1 + ClipHigh is clipped (DAPO's
	// clip-higher when above ClipLow); unset, it is the resolved ClipLow; 0
	// clips every ratio above 1.
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
	// MaxGradNorm clips the gradient's global norm (default 1; 0 disables).
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
// validated: the loss an endpoint applies (rlcore.Loss).
type ResolvedLoss = rlcore.Loss

// WithDefaults returns lc with each unset field at its default from the one
// default table, rlcore.DefaultLoss (PROTOCOL.md, "LossConfig"; the run
// config's grpo.loss takes the same). learning_rate has none (it is
// required) and stays unset.
func (lc LossConfig) WithDefaults() LossConfig {
	d := rlcore.DefaultLoss()
	orDefault(&lc.Type, d.Type)
	orDefault(&lc.ClipLow, d.ClipLow)
	orDefault(&lc.ClipHigh, *lc.ClipLow) // d.ClipHigh is nil: the resolved clip_low
	orDefault(&lc.KLCoef, d.KLCoef)
	orDefault(&lc.KLEstimator, d.KLEstimator)
	orDefault(&lc.ClipRatioC, d.ClipRatioC)
	orDefault(&lc.Mu, d.Mu)
	orDefault(&lc.MaxGradNorm, d.MaxGradNorm)
	orDefault(&lc.WeightDecay, 0) // d.WeightDecay is nil: the endpoint's default, 0 here
	orDefault(&lc.MaxLength, 0)   // d.MaxLength is nil: the longest sample, 0 on the wire
	orDefault(&lc.Temperature, d.Temperature)
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
	if err := l.Validate(rlcore.DefaultRegistry()); err != nil {
		var fe *fielderr.Error
		if !errors.As(err, &fe) {
			return ResolvedLoss{}, &Error{Code: CodeInvalidArgument, Message: "loss: " + err.Error(), cause: err}
		}
		return ResolvedLoss{}, &Error{Code: CodeInvalidArgument, Message: "loss." + fe.Error(), cause: fe}
	}
	return l, nil
}

// lossErr is an invalid_argument error naming loss.FIELD.
func lossErr(field, format string, args ...any) *Error {
	fe := &fielderr.Error{Field: field, Msg: fmt.Sprintf(format, args...)}
	return &Error{Code: CodeInvalidArgument, Message: "loss." + fe.Error(), cause: fe}
}

// LossConfigOf returns l with every field set: what the Go client sends.
func LossConfigOf(l ResolvedLoss) LossConfig {
	return LossConfig{
		Type: &l.Type, ClipLow: &l.ClipLow, ClipHigh: &l.ClipHigh, KLCoef: &l.KLCoef, KLEstimator: &l.KLEstimator,
		ClipRatioC: &l.ClipRatioC, Mu: &l.Mu, MaxGradNorm: &l.MaxGradNorm, LearningRate: &l.LearningRate,
		WeightDecay: &l.WeightDecay, MaxLength: &l.MaxLength, Temperature: &l.Temperature,
	}
}
