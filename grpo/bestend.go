package grpo

import (
	"context"
	"fmt"

	"github.com/himes-rl/himes/trainer"
)

// LoadsBestAtEnd resolves grpo.load_best_at_end (TRL's
// load_best_model_at_end): unset, it is on whenever the run keeps a best
// checkpoint (a best_metric) and has held-out turns to choose it on.
func (c Config) LoadsBestAtEnd(evalTurns int) bool {
	if c.LoadBestAtEnd != nil {
		return *c.LoadBestAtEnd
	}
	return c.BestMetric != "" && evalTurns > 0
}

// loadBestAtEnd makes the best checkpoint the run's final policy: it is
// loaded into the trainer after the last checkpoint (which stays the
// latest, for --resume and `--checkpoint latest`), and status.json's final
// names it. Without a best checkpoint, or when the latest is the best, the
// final policy is the latest.
func (l *Loop) loadBestAtEnd(ctx context.Context) error {
	final := &FinalCheckpoint{Which: "latest", Step: l.state.Step}
	l.final = final
	if !l.cfg.LoadsBestAtEnd(len(l.deps.Eval)) {
		return nil
	}
	b := l.state.Best
	if b == nil {
		l.log.Warn("grpo.load_best_at_end: no best checkpoint (no evaluation computed grpo.best_metric); the final policy is the latest",
			"step", l.state.Step)
		return nil
	}
	final.Which, final.Step, final.Metric, final.Value = "best", b.Step, b.Metric, new(b.Value)
	if b.Step == 0 && l.state.Step > 0 {
		// No evaluation beat the one before GRPO: the final policy is the
		// starting one (the base, or the SFT policy), not what GRPO trained.
		// Correct by the metric, but a researcher must not mistake it for a
		// trained result.
		l.log.Warn("grpo.load_best_at_end: no evaluation improved on step 0's, so the final policy is the one GRPO started from; "+
			"--set grpo.load_best_at_end=false keeps the last step's", "metric", b.Metric, "value", round4(b.Value), "latest_step", l.state.Step)
	}
	if b.TrainerCheckpoint == l.state.TrainerCheckpoint {
		l.log.Info("final policy: the latest checkpoint is the best", "step", b.Step, "metric", b.Metric, "value", round4(b.Value))
		return nil
	}
	resp, err := l.deps.Policy.Load(ctx, trainer.LoadRequest{
		StepID: l.stepID("load-best-" + b.TrainerCheckpoint), Name: b.TrainerCheckpoint, ExpectedRunID: l.state.RunID})
	if err != nil {
		return fmt.Errorf("grpo.load_best_at_end: load the best checkpoint %q (step %d): %w", b.TrainerCheckpoint, b.Step, err)
	}
	if b.PolicyVersion > 0 && resp.PolicyVersion != b.PolicyVersion {
		return fmt.Errorf("grpo.load_best_at_end: the best checkpoint %q loaded at policy version %d, the run recorded %d",
			b.TrainerCheckpoint, resp.PolicyVersion, b.PolicyVersion)
	}
	l.log.Info("final policy: the best checkpoint (grpo.load_best_at_end)", "best_step", b.Step, "metric", b.Metric,
		"value", round4(b.Value), "latest_step", l.state.Step)
	return nil
}

// FinalCheckpoint is which checkpoint a finished run's final policy is
// (status.json's final).
type FinalCheckpoint struct {
	Which  string   `json:"which"` // best or latest
	Step   int      `json:"step"`
	Metric string   `json:"metric,omitempty"`
	Value  *float64 `json:"value,omitempty"`
}
