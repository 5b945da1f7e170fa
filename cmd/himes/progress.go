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
	p.bar.Describe(fmt.Sprintf("step %d  reward %.3f  KL %.4f", m.Step, m.RewardMean, m.KL))
	_ = p.bar.Set(m.Step)
}

func (p *barProgress) Eval(m grpo.EvalMetrics) {
	// Printed above the bar, so the eval history stays on screen.
	_ = p.bar.Clear()
	fmt.Fprintf(p.w, "eval @ step %d (%s): reward %.4f (raw question %.4f)  Recall@10 %.3f (raw %.3f)  MRR %.3f (raw %.3f)\n",
		m.Step, m.Phase, m.Policy.Reward, m.Raw.Reward, m.Policy.Recall10, m.Raw.Recall10, m.Policy.MRR, m.Raw.MRR)
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
	slog.Info("step", "step", m.Step, "of", p.total, "reward", round(m.RewardMean), "rougeL_f1", round(m.Terms.RougeLF1),
		"em", round(m.Terms.EM), "hit", round(m.Terms.Hit), "kl", round(m.KL), "zero_var", round(m.ZeroVarFrac),
		"failed", m.FailedRollouts, "step_s", round(m.StepSeconds))
}

func (p *logProgress) Eval(m grpo.EvalMetrics) { grpo.LogEval(slog.Default(), m) }

func (p *logProgress) Finish() {
	slog.Info("training finished", "elapsed_s", time.Since(p.start).Round(time.Millisecond).Seconds())
}

// round keeps log lines short: 4 decimals.
func round(x float64) float64 { return math.Round(x*1e4) / 1e4 }
