package ablate

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/himes-rl/himes/evaluate"

	"golang.org/x/sync/errgroup"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/report"
)

// SweepRun is one grid point of a sweep: its training run.
type SweepRun struct {
	Point
	RunName string `json:"run_name"`
	RunDir  string `json:"run_dir"`
}

// PlanSweep names a run per grid point (<base>-<point>) under the base
// config's output dir, and checks every point yields a valid config before
// anything is launched.
func PlanSweep(g Grid, base configs.Config) ([]SweepRun, error) {
	var out []SweepRun
	seen := map[string]bool{}
	for _, p := range g.Points() {
		name := base.Run.Name + "-" + evaluate.FileSafe(strings.ReplaceAll(p.Name, " ", "_"))
		if seen[name] {
			return nil, fmt.Errorf("%s: two grid points map to run %s", g.Source, name)
		}
		seen[name] = true
		cfg, err := g.Apply(base, p)
		if err != nil {
			return nil, err
		}
		cfg.Run.Name = name
		if err := cfg.Validate(); err != nil {
			return nil, fmt.Errorf("%s: point %s: %w", g.Source, p.Name, err)
		}
		out = append(out, SweepRun{Point: p, RunName: name, RunDir: filepath.Join(cfg.Run.OutputDir, name)})
	}
	return out, nil
}

// RunSweep launches every run, at most parallel at once. A failed run does
// not stop the others; its error is returned in its slot.
func RunSweep(ctx context.Context, runs []SweepRun, parallel int, launch func(context.Context, SweepRun) error) []error {
	errs := make([]error, len(runs))
	var eg errgroup.Group
	eg.SetLimit(max(1, parallel))
	for i, r := range runs {
		eg.Go(func() error {
			if err := ctx.Err(); err != nil {
				errs[i] = err
				return nil
			}
			slog.Info("sweep run starting", "run", r.RunName, "point", r.Name)
			errs[i] = launch(ctx, r)
			if errs[i] != nil {
				slog.Error("sweep run failed", "run", r.RunName, "err", errs[i])
			} else {
				slog.Info("sweep run done", "run", r.RunName)
			}
			return nil
		})
	}
	_ = eg.Wait()
	return errs
}

// SweepOptions are what `himes ablate sweep` passes on to every run, and
// where the sweep writes.
type SweepOptions struct {
	// ConfigPath is the base config and Sets its --set overrides, given to
	// each run's `himes train` before the point's own overrides.
	ConfigPath string
	Sets       []string
	// Parallel runs train at once.
	Parallel int
	// Resume and Overwrite are passed to train; with neither, existing run
	// directories are refused before anything starts.
	Resume, Overwrite bool
	// Report writes the runs' overlaid plots to <run.name>-sweep/report/.
	Report bool
	// Out is the JSON table ("" = <run.output_dir>/<run.name>-sweep/sweep.json).
	Out string
	// Progress, when set, is told the runs ended (done or failed) of the
	// total: once with none ended as the sweep starts, then after each run.
	Progress RunProgress
}

// RunProgress is told how many of a batch's total runs ended, failed
// ones among them.
type RunProgress func(ended, failed, total int)

// runCount counts the runs of a batch as they end, for a RunProgress.
type runCount struct {
	mu                   sync.Mutex
	report               RunProgress
	ended, failed, total int
}

func newRunCount(report RunProgress, total int) *runCount {
	c := &runCount{report: report, total: total}
	if report != nil {
		report(0, 0, total)
	}
	return c
}

// end records n runs ended with err (nil: done).
func (c *runCount) end(n int, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended += n
	if err != nil {
		c.failed += n
	}
	if c.report != nil {
		c.report(c.ended, c.failed, c.total)
	}
}

// Sweep trains every planned run (PlanSweep) with `himes train`, each
// logging to <run.output_dir>/<run.name>-sweep/<run>.log, and tabulates
// their final evaluations: sweep.json, the Markdown table on stdout, and
// for points repeated over run.seed their summary over seeds
// (sweep_seeds.json). A failed run does not stop the others; Sweep returns
// an error naming how many failed.
func Sweep(ctx context.Context, stdout io.Writer, base configs.Config, runs []SweepRun, o SweepOptions) error {
	if !o.Resume && !o.Overwrite {
		// Checked up front: train would refuse, and the table would show
		// the old runs' metrics as if they were new.
		var existing []string
		for _, r := range runs {
			if _, err := os.Stat(r.RunDir); err == nil {
				existing = append(existing, r.RunDir)
			}
		}
		if len(existing) > 0 {
			return fmt.Errorf("sweep: run directories already exist (pass --resume or --overwrite): %s", strings.Join(existing, ", "))
		}
	}
	exe, err := himesBinary("sweep")
	if err != nil {
		return err
	}
	logDir := filepath.Join(base.Run.OutputDir, base.Run.Name+"-sweep")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return fmt.Errorf("sweep: %w", err)
	}
	slog.Info("sweep", "points", len(runs), "parallel", o.Parallel, "logs", logDir)
	count := newRunCount(o.Progress, len(runs))
	errs := RunSweep(ctx, runs, o.Parallel, func(ctx context.Context, r SweepRun) (err error) {
		defer func() { count.end(1, err) }()
		args := []string{"train", "--config", o.ConfigPath, "--log-format", "json"}
		for _, s := range o.Sets {
			args = append(args, "--set", s)
		}
		for _, ov := range r.Overrides {
			args = append(args, "--set", ov)
		}
		args = append(args, "--set", "run.name="+r.RunName)
		if o.Resume {
			args = append(args, "--resume")
		}
		if o.Overwrite {
			args = append(args, "--overwrite")
		}
		return runChild(ctx, exe, args, filepath.Join(logDir, r.RunName+".log"))
	})
	rows := GatherSweep(ctx, runs, errs)
	out := o.Out
	if out == "" {
		out = filepath.Join(logDir, "sweep.json")
	}
	if err := atomicfile.WriteJSON(out, rows); err != nil {
		return err
	}
	if err := WriteSweepMarkdown(stdout, rows); err != nil {
		return err
	}
	// Points repeated over run.seed: mean, sd and a t-interval per metric.
	if groups := GroupSeeds(rows, 0.95); groups != nil {
		if err := atomicfile.WriteJSON(filepath.Join(filepath.Dir(out), "sweep_seeds.json"), groups); err != nil {
			return err
		}
		if err := WriteSeedsMarkdown(stdout, groups); err != nil {
			return err
		}
	}
	// The runs overlaid in one report, so the curves can be compared too.
	var dirs []string
	for i, r := range runs {
		if errs[i] == nil {
			dirs = append(dirs, r.RunDir)
		}
	}
	if o.Report && len(dirs) > 0 {
		if res, err := report.Generate(ctx, dirs, filepath.Join(logDir, "report")); err != nil {
			slog.Warn("sweep report not written", "err", err)
		} else {
			slog.Info("sweep report written", "html", res.HTML)
		}
	}
	failed := 0
	for _, e := range errs {
		if e != nil {
			failed++
		}
	}
	if failed > 0 {
		return fmt.Errorf("sweep: %d of %d runs failed (logs in %s)", failed, len(runs), logDir)
	}
	return nil
}

// SweepRow is the gathered outcome of one sweep run.
type SweepRow struct {
	SweepRun
	Error       string   `json:"error,omitempty"`
	Steps       int      `json:"steps"`
	RewardStart *float64 `json:"reward_start,omitempty"`
	RewardEnd   *float64 `json:"reward_end,omitempty"`
	EvalStep    int      `json:"eval_step,omitempty"`
	// Final evaluation of the greedy policy and the raw question.
	PolicyReward *float64 `json:"policy_reward,omitempty"`
	RawReward    *float64 `json:"raw_reward,omitempty"`
	PolicyR10    *float64 `json:"policy_recall_10,omitempty"`
	RawR10       *float64 `json:"raw_recall_10,omitempty"`
	PolicyMRR    *float64 `json:"policy_mrr,omitempty"`
	RawMRR       *float64 `json:"raw_mrr,omitempty"`
	PolicyNDCG3  *float64 `json:"policy_ndcg_cut_3,omitempty"`
	RawNDCG3     *float64 `json:"raw_ndcg_cut_3,omitempty"`
}

func ptr(v float64) *float64 { return &v }

// GatherSweep reads each run's metrics.jsonl for its final evaluation.
func GatherSweep(ctx context.Context, runs []SweepRun, errs []error) []SweepRow {
	rows := make([]SweepRow, len(runs))
	for i, r := range runs {
		row := SweepRow{SweepRun: r}
		if i < len(errs) && errs[i] != nil {
			row.Error = errs[i].Error()
		}
		run, err := report.LoadRun(ctx, r.RunDir)
		if err != nil {
			if row.Error == "" {
				row.Error = err.Error()
			}
			rows[i] = row
			continue
		}
		s := report.Summarize(run)
		row.Steps = s.Steps
		if s.Steps > 0 {
			row.RewardStart, row.RewardEnd = ptr(s.RewardStart), ptr(s.RewardEnd)
		}
		if e := s.Final; e != nil {
			row.EvalStep = e.Step
			row.PolicyReward, row.RawReward = ptr(e.Policy.Reward), ptr(e.Raw.Reward)
			row.PolicyR10, row.RawR10 = e.Policy.Recall10, e.Raw.Recall10
			row.PolicyMRR, row.RawMRR = e.Policy.MRR, e.Raw.MRR
			row.PolicyNDCG3, row.RawNDCG3 = e.Policy.NDCG3, e.Raw.NDCG3
		}
		rows[i] = row
	}
	return rows
}

func cell(v *float64) string {
	if v == nil || math.IsNaN(*v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", *v)
}

func deltaCell(a, b *float64) string {
	if a == nil || b == nil {
		return "–"
	}
	return fmt.Sprintf("%+.3f", *a-*b)
}

// WriteSweepMarkdown writes one row per grid point.
func WriteSweepMarkdown(w io.Writer, rows []SweepRow) error {
	var b strings.Builder
	b.WriteString("| point | run | steps | train reward start → end | eval step | policy reward | raw reward | Δ | policy R@10 | raw R@10 | policy MRR | raw MRR | policy NDCG@3 | raw NDCG@3 | status |\n")
	b.WriteString("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		status := "ok"
		if r.Error != "" {
			status = "failed: " + evaluate.MarkdownEscape(strings.ReplaceAll(r.Error, "\n", " "))
		}
		eval := "–"
		if r.EvalStep > 0 || r.PolicyReward != nil {
			eval = fmt.Sprint(r.EvalStep)
		}
		fmt.Fprintf(&b, "| %s | %s | %d | %s → %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			evaluate.MarkdownEscape(r.Name), evaluate.MarkdownEscape(r.RunName), r.Steps, cell(r.RewardStart), cell(r.RewardEnd), eval,
			cell(r.PolicyReward), cell(r.RawReward), deltaCell(r.PolicyReward, r.RawReward),
			cell(r.PolicyR10), cell(r.RawR10), cell(r.PolicyMRR), cell(r.RawMRR), cell(r.PolicyNDCG3), cell(r.RawNDCG3), status)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteRescoreMarkdown writes the rescoring table and the correlations.
func WriteRescoreMarkdown(w io.Writer, res []RescoreResult) error {
	var b strings.Builder
	b.WriteString("| setting | rollouts | groups | reward | Rouge-L F1 | EM (reward) | hit | rank reward (judged) | zero-var groups | included | Kendall τ vs own (groups) | sign flips | max Δreward vs logged | max Δadv vs logged |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range res {
		name := r.Name
		if r.Own {
			name += " (run's own)"
		}
		tau := "–"
		if r.KendallTau != nil {
			tau = fmt.Sprintf("%.3f (%d)", *r.KendallTau, r.TauGroups)
		}
		rank := "– (0)" // no rollout of the ledger carries a rank
		if r.Judged > 0 {
			rank = fmt.Sprintf("%.4f (%d)", r.RankReward, r.Judged)
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %.4f | %.4f | %.4f | %.4f | %s | %.3f | %.3f | %s | %.3f | %.3g | %.3g |\n",
			evaluate.MarkdownEscape(name), r.Rollouts, r.Groups, r.Reward, r.RougeF1, r.EM, r.Hit, rank, r.ZeroVarShare, r.IncludedShare,
			tau, r.SignFlips, r.MaxRewardDiff, r.MaxAdvantageDiff)
	}
	b.WriteString("\nPearson correlations over rollouts (– where a side is constant):\n\n| setting |")
	var pairs []string
	for i := range termNames {
		for j := i + 1; j < len(termNames); j++ {
			pairs = append(pairs, termNames[i]+"~"+termNames[j])
		}
	}
	for _, p := range pairs {
		b.WriteString(" " + p + " |")
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(pairs)) + "\n")
	for _, r := range res {
		b.WriteString("| " + evaluate.MarkdownEscape(r.Name) + " |")
		for _, p := range pairs {
			b.WriteString(" " + cell(r.Correlations[p]) + " |")
		}
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}
