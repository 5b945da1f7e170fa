package main

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"time"

	"github.com/schollz/progressbar/v3"

	"github.com/himes-rl/himes/grpo"
)

// newProgress shows training progress: a bar with the latest reward and KL
// on a terminal, or one log line per step otherwise (CI, files, pipes).
func newProgress(w io.Writer, interactive bool) grpo.Progress {
	if interactive {
		return &barProgress{w: w}
	}
	return &logProgress{}
}

type barProgress struct {
	w   io.Writer
	bar *progressbar.ProgressBar
}

func (p *barProgress) Start(done, total int) {
	p.bar = progressbar.NewOptions(total,
		progressbar.OptionSetWriter(p.w),
		progressbar.OptionSetDescription("grpo"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetItsString("step"),
		progressbar.OptionShowIts(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionThrottle(100*time.Millisecond),
		progressbar.OptionClearOnFinish(),
	)
	_ = p.bar.Set(done)
}

func (p *barProgress) Step(m grpo.StepMetrics) {
	p.bar.Describe(barText(m))
	_ = p.bar.Set(m.Step)
}

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
	_ = p.bar.Clear()
	line := fmt.Sprintf("eval @ step %d (%s): reward %.4f (raw question %.4f)", m.Step, m.Phase, m.Policy.Reward, m.Raw.Reward)
	if m.Policy.Recall10 != nil && m.Raw.Recall10 != nil {
		line += fmt.Sprintf("  Recall@10 %.3f (raw %.3f)", *m.Policy.Recall10, *m.Raw.Recall10)
	}
	if m.Policy.MRR != nil && m.Raw.MRR != nil {
		line += fmt.Sprintf("  MRR %.3f (raw %.3f)", *m.Policy.MRR, *m.Raw.MRR)
	}
	fmt.Fprintln(p.w, line)
	if m.Compared < m.Turns {
		fmt.Fprintf(p.w, "  rewards over the %d of %d turns both completed (failed: policy %d, raw %d)\n",
			m.Compared, m.Turns, m.Policy.Failed, m.Raw.Failed)
	}
}

func (p *barProgress) Finish() { _ = p.bar.Finish() }

// logProgress writes one structured line per step: quiet and line-oriented.
type logProgress struct {
	total int
	start time.Time
}

func (p *logProgress) Start(done, total int) { p.total, p.start = total, time.Now() }

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
	slog.Info("step", append(attrs, "failed", m.FailedRollouts, "step_s", round(m.StepSeconds))...)
}

func (p *logProgress) Eval(m grpo.EvalMetrics) { grpo.LogEval(slog.Default(), m) }

func (p *logProgress) Finish() {
	slog.Info("training finished", "elapsed_s", time.Since(p.start).Round(time.Millisecond).Seconds())
}

// round keeps log lines short: 4 decimals.
func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }
