package rlcore

import (
	"math"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Loss types of a grpo_step (trainer/PROTOCOL.md): how the per-token
// clipped-surrogate losses of a batch of B samples are aggregated.
const (
	// LossGRPO: the mean over each sample's tokens, then over samples
	// (DeepSeekMath; TRL's loss_type "grpo", verl's "seq-mean-token-mean").
	LossGRPO = "grpo"
	// LossBNPO: the sum over the batch's tokens divided by their number
	// (TRL's "bnpo", verl's "token-mean").
	LossBNPO = "bnpo"
	// LossDAPO: as LossBNPO for one process (TRL's "dapo": normalized by
	// the tokens of the whole global batch).
	LossDAPO = "dapo"
	// LossDrGRPO: the token sum over B × L_max (Dr. GRPO; TRL's "dr_grpo",
	// verl's "seq-mean-token-sum-norm").
	LossDrGRPO = "dr_grpo"
)

// LossTypes returns every loss type.
func LossTypes() []string { return []string{LossGRPO, LossBNPO, LossDAPO, LossDrGRPO} }

// LossDefaults is the one table of the loss's defaults: what an unset key
// of a run's grpo.loss, and an absent or null field of a grpo_step's loss,
// means (trainer.LossConfig.WithDefaults applies it; the Python reference
// trainer's protocol.loss_defaults() is tested against its JSON,
// rlcore/testdata/loss_defaults.json). A nil entry depends on something
// else, as documented on it. learning_rate has no default: it is required.
//
// Before this table, grpo.loss (grpo/config.go) and the protocol
// (trainer/loss.go, protocol.py) disagreed on two keys: grpo.loss had
// clip_high 0.2 whatever clip_low was and max_grad_norm 1, the protocol
// clip_high = clip_low and max_grad_norm 0. The table keeps what every
// shipped config effectively ran with: max_grad_norm 1 (TRL's and verl's
// default too; the harness always sends it, so only a request that omits
// it changes) and clip_high = clip_low (TRL's epsilon_high, verl's
// clip_ratio_high; every shipped config sets clip_high or leaves clip_low
// at 0.2, where the two rules agree).
type LossDefaults struct {
	Type    string  `json:"type"`
	ClipLow float64 `json:"clip_low"`
	// ClipHigh is nil: clip_high defaults to the resolved clip_low.
	ClipHigh    *float64 `json:"clip_high"`
	KLCoef      float64  `json:"kl_coef"`
	KLEstimator string   `json:"kl_estimator"`
	ClipRatioC  float64  `json:"clip_ratio_c"` // 0: no dual clip
	Mu          int      `json:"mu"`
	MaxGradNorm float64  `json:"max_grad_norm"` // 0 disables clipping
	// WeightDecay is nil: the endpoint's default (the embedded policy's and
	// the Go client's 0; the reference server's --weight-decay).
	WeightDecay *float64 `json:"weight_decay"`
	// MaxLength is nil: dr_grpo's L_max is the longest sample of the
	// request (a present 0 means the same).
	MaxLength   *int    `json:"max_length"`
	Temperature float64 `json:"temperature"`
}

// DefaultLoss returns the table.
func DefaultLoss() LossDefaults {
	return LossDefaults{
		Type: LossGRPO, ClipLow: 0.2, KLCoef: 0, KLEstimator: KLK3, ClipRatioC: 0,
		Mu: 1, MaxGradNorm: 1, Temperature: 1,
	}
}

// Loss is a grpo_step's loss with every value set (trainer.ResolvedLoss is
// this type): what an endpoint applies.
//
// The PPO clip: a token's ratio r = π/π_old enters the surrogate as
// min(r·A, clip(r, 1 − ClipLow, 1 + ClipHigh)·A). ClipLow = 0 is not "no
// lower clipping": the range's lower end is then 1, so every ratio below 1
// is clipped — the tightest lower clip (the conformance check clip_low_zero
// asserts it). There is no way to switch lower clipping off; ClipLow close
// to 1 clips least. ClipHigh = 0 likewise clips every ratio above 1.
type Loss struct {
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

// Validate checks every value's range, the KL estimator against reg; a
// failure is a *fielderr.Error naming the key (clip_low, kl_estimator, …).
// The type is checked by the caller (the protocol answers it with its own
// error code).
func (l Loss) Validate(reg *Registry) error {
	switch {
	case !finite(l.ClipLow) || l.ClipLow < 0 || l.ClipLow >= 1:
		return fielderr.New("clip_low", "must be in [0, 1), got %v", l.ClipLow)
	case !finite(l.ClipHigh) || l.ClipHigh < 0:
		return fielderr.New("clip_high", "must be ≥ 0, got %v", l.ClipHigh)
	case !finite(l.KLCoef) || l.KLCoef < 0:
		return fielderr.New("kl_coef", "must be ≥ 0, got %v", l.KLCoef)
	}
	if _, err := reg.KLEstimator(l.KLEstimator); err != nil {
		return fielderr.New("kl_estimator", "%v", err)
	}
	switch {
	case !finite(l.ClipRatioC) || l.ClipRatioC != 0 && l.ClipRatioC <= 1:
		return fielderr.New("clip_ratio_c", "must be > 1 (dual-clip PPO) or 0 (none), got %v", l.ClipRatioC)
	case l.Mu < 1:
		return fielderr.New("mu", "must be ≥ 1, got %d", l.Mu)
	case !finite(l.MaxGradNorm) || l.MaxGradNorm < 0:
		return fielderr.New("max_grad_norm", "must be ≥ 0 (0 disables clipping), got %v", l.MaxGradNorm)
	case !finite(l.LearningRate) || l.LearningRate <= 0:
		return fielderr.New("learning_rate", "must be > 0, got %v", l.LearningRate)
	case !finite(l.WeightDecay) || l.WeightDecay < 0:
		return fielderr.New("weight_decay", "must be ≥ 0, got %v", l.WeightDecay)
	case l.MaxLength < 0:
		return fielderr.New("max_length", "must be ≥ 0 (0 is the longest sample), got %d", l.MaxLength)
	case !finite(l.Temperature) || l.Temperature <= 0:
		return fielderr.New("temperature", "must be > 0, got %v", l.Temperature)
	}
	return nil
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
