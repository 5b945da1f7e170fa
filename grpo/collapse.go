package grpo

import (
	"context"
	"fmt"
	"math"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/trainer"
)

// CollapseConfig is the collapse detector (grpo.collapse): an evaluation
// after GRPO step s counts as a collapse when the greedy policy rewrites
// (almost) every held-out turn to the raw question — it adds nothing, which
// is what the term-selection policy does once every keep probability has
// gone to 0 — or when step s's policy entropy fell below a floor. What the
// run then does is grpo.on_collapse.
type CollapseConfig struct {
	// AddsNothing is the share of held-out turns whose greedy rewrite is the
	// raw question at or above which an evaluation is a collapse; 0 turns
	// this check off.
	AddsNothing float64 `yaml:"adds_nothing"`
	// EntropyFloor: the last step's policy entropy (nats per token, from
	// endpoints that report it) below this is a collapse; 0 turns it off.
	EntropyFloor float64 `yaml:"entropy_floor"`
	// LRFactor multiplies the learning rate at each rollback (on_collapse:
	// rollback), for the rest of the run.
	LRFactor float64 `yaml:"lr_factor"`
}

// Collapse responses (grpo.on_collapse).
const (
	CollapseWarn     = "warn"     // log a warning naming the step, and go on
	CollapseStop     = "stop"     // checkpoint the step and stop the run with an error
	CollapseRollback = "rollback" // reload the best checkpoint and lower the learning rate
)

// DefaultCollapseConfig warns when ≥ 95% of the held-out rewrites are the raw
// question, or the entropy is under 0.01 nats.
func DefaultCollapseConfig() CollapseConfig {
	return CollapseConfig{AddsNothing: 0.95, EntropyFloor: 0.01, LRFactor: 0.5}
}

func (c CollapseConfig) validate() error {
	switch {
	case !(c.AddsNothing >= 0 && c.AddsNothing <= 1):
		return fielderr.New("adds_nothing", "must be in [0, 1] (0: off), got %v", c.AddsNothing)
	case !(c.EntropyFloor >= 0) || math.IsInf(c.EntropyFloor, 0):
		return fielderr.New("entropy_floor", "must be ≥ 0 (0: off), got %v", c.EntropyFloor)
	case !(c.LRFactor > 0 && c.LRFactor <= 1):
		return fielderr.New("lr_factor", "must be in (0, 1], got %v", c.LRFactor)
	}
	return nil
}

func validateOnCollapse(v string) error {
	switch v {
	case CollapseWarn, CollapseStop, CollapseRollback:
		return nil
	}
	return fielderr.New("on_collapse", "must be warn, stop or rollback, got %q", v)
}

// addsNothing is the share of rewrites equal to their raw question, up to
// case and spacing (0 for no turns).
func addsNothing(rewrites, raw []string) float64 {
	if len(rewrites) == 0 {
		return 0
	}
	same := 0
	for i, r := range rewrites {
		if sameText(r, raw[i]) {
			same++
		}
	}
	return float64(same) / float64(len(rewrites))
}

func sameText(a, b string) bool {
	return strings.EqualFold(strings.Join(strings.Fields(a), " "), strings.Join(strings.Fields(b), " "))
}

// evalReason says why evaluation m is a collapse by its adds-nothing share,
// or "" when it is not. The untrained policy (phase init or sft) may well
// add nothing; only evaluations after GRPO steps count.
func (c CollapseConfig) evalReason(m EvalMetrics) string {
	a := m.Policy.AddsNothing
	if m.Phase != "grpo" || m.Step == 0 || c.AddsNothing == 0 || a == nil {
		return ""
	}
	if *a >= c.AddsNothing {
		return fmt.Sprintf("the greedy policy rewrites %.0f%% of the held-out turns to the raw question (grpo.collapse.adds_nothing %v)",
			100**a, c.AddsNothing)
	}
	return ""
}

// addsNothingCollapse is evalReason for the run: a policy that has not yet
// rewritten at any evaluation (an untrained one keeps no term greedily) is
// still learning, not collapsed; once one evaluation saw it rewrite
// (State.Rewrote), falling back to the raw question is a collapse.
func (l *Loop) addsNothingCollapse(m EvalMetrics) string {
	c := l.cfg.Collapse
	if a := m.Policy.AddsNothing; a != nil && (c.AddsNothing == 0 || *a < c.AddsNothing) {
		l.state.Rewrote = true
		return ""
	}
	if !l.state.Rewrote {
		return ""
	}
	return c.evalReason(m)
}

// entropyReason says why a step's entropy is a collapse, or "".
func (c CollapseConfig) entropyReason(entropy *float64) string {
	if c.EntropyFloor == 0 || entropy == nil || *entropy >= c.EntropyFloor {
		return ""
	}
	return fmt.Sprintf("the policy's entropy %.4g is below grpo.collapse.entropy_floor %v", *entropy, c.EntropyFloor)
}

// collapseCheck runs after the evaluation m at GRPO step (m may be nil: no
// held-out turns) with the step's entropy. It returns whether the run must
// checkpoint this step (a rollback changed the policy) and an error that
// stops the run (on_collapse: stop, or a failed rollback). best is the best
// record this evaluation sets, or nil.
func (l *Loop) collapseCheck(ctx context.Context, step int, m *EvalMetrics, entropy *float64, best *BestCheckpoint) (bool, error) {
	if m == nil {
		return false, nil
	}
	reason := m.Collapse
	if r := l.cfg.Collapse.entropyReason(entropy); r != "" {
		if reason != "" {
			reason += "; "
		}
		reason += r
	}
	if reason == "" {
		return false, nil
	}
	line := CollapseMetrics{Kind: "collapse", Step: step, Reason: reason, Action: l.cfg.OnCollapse}
	var (
		changed bool
		err     error
	)
	switch l.cfg.OnCollapse {
	case CollapseStop:
		l.log.Error("collapse: stopping (grpo.on_collapse: stop)", "step", step, "reason", reason)
		err = fmt.Errorf("step %d: the policy collapsed: %s (grpo.on_collapse: stop; the best checkpoint is kept)", step, reason)
		changed = true // checkpoint the step before stopping
	case CollapseRollback:
		changed, line.BestStep, err = l.rollback(ctx, step, reason, best)
		if err != nil {
			return false, err
		}
	default:
		l.log.Warn("collapse: the policy adds nothing or stopped exploring (grpo.on_collapse: warn)", "step", step, "reason", reason)
	}
	line.LRScale = l.lrScale()
	if werr := l.writeLine(&line); werr != nil {
		return false, werr
	}
	return changed, err
}

// CollapseMetrics is one "collapse" line of metrics.jsonl: the detector
// fired after the evaluation at Step.
type CollapseMetrics struct {
	Kind string `json:"kind"` // "collapse"
	Stamp
	Step   int    `json:"step"`
	Reason string `json:"reason"`
	// Action is grpo.on_collapse.
	Action string `json:"action"`
	// BestStep is the step of the best checkpoint the policy was rolled back
	// to; absent when none was loaded.
	BestStep *int `json:"rolled_back_to,omitempty"`
	// LRScale multiplies the scheduled learning rate from here on (1: never lowered).
	LRScale float64 `json:"lr_scale"`
}

// rollback reloads the best checkpoint into the trainer and multiplies the
// learning rate by lr_factor for the rest of the run. The step counter and the
// data order go on; the policy version is the best checkpoint's again.
func (l *Loop) rollback(ctx context.Context, step int, reason string, best *BestCheckpoint) (bool, *int, error) {
	b := l.state.Best
	if best != nil || b == nil || b.Step == step {
		// This evaluation is the best (or there is none): nothing better to
		// return to, so only the learning rate goes down.
		l.state.LRScale = l.lrScale() * l.cfg.Collapse.LRFactor
		l.log.Warn("collapse: no better checkpoint to roll back to; lowering the learning rate", "step", step, "reason", reason,
			"lr_scale", l.state.LRScale)
		return false, nil, nil
	}
	resp, err := l.deps.Policy.Load(ctx, trainer.LoadRequest{
		StepID: l.stepID(fmt.Sprintf("rollback-%06d-%s", step, b.TrainerCheckpoint)), Name: b.TrainerCheckpoint, ExpectedRunID: l.state.RunID})
	if err != nil {
		return false, nil, fmt.Errorf("step %d: collapse rollback: load the best checkpoint %q: %w", step, b.TrainerCheckpoint, err)
	}
	l.state.PolicyVersion = resp.PolicyVersion
	l.state.TrainerCheckpoint = b.TrainerCheckpoint
	if b.Step == 0 {
		// Back to SFT's checkpoint, and so to SFT's optimizer state.
		l.state.OptimizerReset = false
	}
	l.state.LRScale = l.lrScale() * l.cfg.Collapse.LRFactor
	l.log.Warn("collapse: rolled back to the best checkpoint and lowered the learning rate (grpo.on_collapse: rollback)",
		"step", step, "reason", reason, "best_step", b.Step, "best_value", round4(b.Value), "lr_scale", l.state.LRScale,
		"policy_version", resp.PolicyVersion)
	if resp.PolicyVersion != b.PolicyVersion && b.PolicyVersion > 0 {
		return false, nil, fmt.Errorf("step %d: collapse rollback: the best checkpoint %q loaded at policy version %d, the run recorded %d",
			step, b.TrainerCheckpoint, resp.PolicyVersion, b.PolicyVersion)
	}
	return true, new(b.Step), nil
}

// lrScale is the factor rollbacks applied to the learning rate (1 before any).
func (l *Loop) lrScale() float64 {
	if l.state.LRScale == 0 {
		return 1
	}
	return l.state.LRScale
}
