package main

import (
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/progress"
)

// newProgress shows training progress: a bar with the latest reward and KL
// on a terminal, or one log line per step with elapsed time and ETA
// otherwise (CI, files, pipes). now is the clock (nil: time.Now).
func newProgress(out *progress.Output, now func() time.Time) grpo.Progress {
	if out.Terminal() {
		return &barProgress{out: out, now: now}
	}
	return &logProgress{now: now, log: slog.Default()}
}

type barProgress struct {
	out *progress.Output
	now func() time.Time
	bar *progress.Bar
}

func (p *barProgress) Start(done, total int) {
	p.bar = progress.New(p.out, progress.Options{Label: "grpo", Unit: "step", Total: total, Done: done, Now: p.now})
}

// Step draws the step's number and its count in one update, so the label
// and the counter agree.
func (p *barProgress) Step(m grpo.StepMetrics) { p.bar.Update(m.Step, barText(m)) }

// barText is the bar's description; a metric that was not computed is left
// out rather than shown as 0.
func barText(m grpo.StepMetrics) string {
	s := fmt.Sprintf("step %d", m.Step)
	if m.RewardMean != nil {
		s += fmt.Sprintf("  reward %.3f", *m.RewardMean)
	} else {
		s += fmt.Sprintf("  reward – (%d of %d rollouts failed)", m.FailedRollouts, m.Rollouts)
	}
	if m.KL != nil {
		s += fmt.Sprintf("  KL %.4f", *m.KL)
	}
	return s
}

func (p *barProgress) Eval(m grpo.EvalMetrics) {
	// Printed above the bar, so the eval history stays on screen.
	line := fmt.Sprintf("eval @ step %d (%s): reward %.4f (raw question %.4f)", m.Step, m.Phase, m.Policy.Reward, m.Raw.Reward)
	if m.Policy.Recall10 != nil && m.Raw.Recall10 != nil {
		line += fmt.Sprintf("  Recall@10 %.3f (raw %.3f)", *m.Policy.Recall10, *m.Raw.Recall10)
	}
	if m.Policy.MRR != nil && m.Raw.MRR != nil {
		line += fmt.Sprintf("  MRR %.3f (raw %.3f)", *m.Policy.MRR, *m.Raw.MRR)
	}
	if m.Policy.NDCG3 != nil && m.Raw.NDCG3 != nil {
		line += fmt.Sprintf("  NDCG@3 %.3f (raw %.3f)", *m.Policy.NDCG3, *m.Raw.NDCG3)
	}
	if m.Compared < m.Turns {
		line += fmt.Sprintf("\n  rewards over the %d of %d turns both completed (failed: policy %d, raw %d)",
			m.Compared, m.Turns, m.Policy.Failed, m.Raw.Failed)
	}
	fmt.Fprintln(p.out, line)
}

func (p *barProgress) Finish() { p.bar.Finish() }

// logProgress writes one structured line per step: quiet and line-oriented,
// with the elapsed time and the ETA of this session's steps.
type logProgress struct {
	log   *slog.Logger
	now   func() time.Time
	total int
	meter *progress.Meter
}

func (p *logProgress) Start(done, total int) {
	p.total, p.meter = total, progress.NewMeter(done, total, p.now)
}

func (p *logProgress) Step(m grpo.StepMetrics) {
	attrs := []any{"step", m.Step, "of", p.total}
	// A metric that was not computed is left out of the line, never logged as 0.
	opt := func(key string, v *float64) {
		if v != nil {
			attrs = append(attrs, key, round(*v))
		}
	}
	opt("reward", m.RewardMean)
	if t := m.Terms; t != nil {
		attrs = append(attrs, "rougeL_f1", round(t.RougeLF1), "em", round(t.EM), "hit", round(t.Hit))
	}
	opt("kl", m.KL)
	opt("zero_var", m.ZeroVarFrac)
	attrs = append(attrs, "failed", m.FailedRollouts, "step_s", round(m.StepSeconds))
	p.log.Info("step", append(attrs, p.meter.Attrs(m.Step, "step")...)...)
}

func (p *logProgress) Eval(m grpo.EvalMetrics) { grpo.LogEval(p.log, m) }

func (p *logProgress) Finish() {
	p.log.Info("training finished", "elapsed_s", progress.Seconds(p.meter.Elapsed()))
}

// round keeps log lines short: 4 decimals.
func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }
