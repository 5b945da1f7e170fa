package main

import (
	"fmt"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/internal/progress"
)

func newAblateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "ablate",
		Short: "Reward ablations: rescore logged rollouts or sweep a grid",
		Long: `Reward ablations over a grid file: a YAML mapping of dotted config keys to
values, e.g.

  reward.alpha: [0, 0.5, 1]
  reward.beta: [0, 0.5]
  reward.hit: [answer, gold]

(aliases: alpha, beta, rank, hit, tokenizer, stem, aggregation, estimator, std,
zero_variance). Points are the Cartesian product, first key outermost.`,
	}
	cmd.AddCommand(newAblateRescoreCmd(), newAblateSweepCmd(), newAblateTransferCmd(), newAblateMemQuantCmd(), newAblateAgreementCmd())
	return cmd
}

func newAblateRescoreCmd() *cobra.Command {
	var grid, data, kb, out string
	cmd := &cobra.Command{
		Use:   "rescore RUN_DIR --grid grid.yaml",
		Short: "Re-score a run's logged rollouts under other reward settings, without calling any model",
		Long: `rescore reads RUN_DIR/ledger/steps-*.parquet and RUN_DIR/config.yaml, re-scores
every logged answer under each grid point (reward.* and grpo.advantage.*
keys), recomputes the advantages step by step, and reports per setting: mean
reward and terms, reward-term correlations, the share of zero-variance groups,
the share of rollouts the update would use, and how the ranking of rewrites
within groups changes against the run's own setting (mean Kendall τ-b of the
advantages, share of advantage sign flips). The run's own setting comes
first; it reproduces the logged rewards and advantages exactly (max Δ 0).

The ledger does not store reference answers or chunk texts: they are looked
up in the run's training data and knowledge base (--data/--kb override the
saved paths).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return ablate.RescoreRun(cmd.Context(), cmd.OutOrStdout(), args[0], grid, data, kb, out)
		},
	}
	cmd.Flags().StringVar(&grid, "grid", "", "grid file (YAML)")
	cmd.Flags().StringVar(&data, "data", "", "training data of the run (default: its config's data.train)")
	cmd.Flags().StringVar(&kb, "kb", "", "knowledge base of the run (default: its config's data.kb)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "JSON output (default: RUN_DIR/rescore.json)")
	_ = cmd.MarkFlagRequired("grid")
	return cmd
}

func newAblateSweepCmd() *cobra.Command {
	var (
		cf                configFlags
		grid              string
		parallel          int
		out               string
		resume, overwrite bool
		withReport        bool
	)
	cmd := &cobra.Command{
		Use:   "sweep --config X --grid grid.yaml [--parallel N]",
		Short: "Train once per grid point, each in its own run directory, and tabulate the final evaluations",
		Long: `sweep runs "himes train" (this binary) once per grid point with the point's
keys as --set overrides and run.name = <run.name>-<point>, N at a time, each
run's output going to <run.output_dir>/<run.name>-sweep/<run>.log. A failed run
does not stop the others. When all have finished it reads each run's
metrics.jsonl and prints one row per point: training reward at the start and
end, and the final held-out evaluation of the policy against the raw question
(also in sweep.json), and writes the runs' overlaid plots to
<run.name>-sweep/report/. Every point is validated before anything starts.

With run.seed as an axis (e.g. seed: [1, 2, 3]), the points that differ only
in their seed are also summarized together: per metric the mean, the sample
standard deviation and a 95% Student-t interval over the seeds (also in
sweep_seeds.json next to sweep.json).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if parallel < 1 {
				return fmt.Errorf("--parallel must be ≥ 1, got %d", parallel)
			}
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			g, err := ablate.ReadGrid(grid)
			if err != nil {
				return err
			}
			runs, err := ablate.PlanSweep(g, cfg)
			if err != nil {
				return err
			}
			if resume && overwrite {
				return fmt.Errorf("--resume and --overwrite exclude each other")
			}
			prog, finish := runProgress(cmd, "sweep")
			defer finish()
			return ablate.Sweep(cmd.Context(), cmd.OutOrStdout(), cfg, runs, ablate.SweepOptions{ConfigPath: cf.path, Sets: cf.sets,
				Parallel: parallel, Resume: resume, Overwrite: overwrite, Report: withReport, Out: out, Progress: prog})
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringVar(&grid, "grid", "", "grid file (YAML)")
	cmd.Flags().IntVar(&parallel, "parallel", 1, "runs trained at once")
	cmd.Flags().BoolVar(&resume, "resume", false, "continue existing runs from their newest checkpoints (passed to train)")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace existing run directories (passed to train)")
	cmd.Flags().BoolVar(&withReport, "report", true, "write the runs' overlaid plots to <run.name>-sweep/report/")
	cmd.Flags().StringVarP(&out, "out", "o", "", "JSON output (default: <run.output_dir>/<run.name>-sweep/sweep.json)")
	_ = cmd.MarkFlagRequired("grid")
	return cmd
}

func newAblateTransferCmd() *cobra.Command {
	var cf configFlags
	var collections []string
	var out string
	var jobs int
	var seeds []int
	var overwrite, resume bool
	var trainerCmd string
	var trainerTimeout time.Duration
	var only, recipes []string
	cmd := &cobra.Command{
		Use:   "transfer --config X --collections a.jsonl,b.jsonl,c.jsonl",
		Short: "Leave one collection out: train on the others, evaluate on it against raw, concat and human rewrites",
		Long: `transfer asks whether a trained rewriter helps on conversations from a
collection it never saw. For each collection it concatenates the others into
<out>/<collection>/train.jsonl and trains with the same config and seed
(data.train = that file, data.eval = the left-out collection), then runs
"himes eval" on the left-out collection with the raw question, the
concatenated history, the human rewrite and the trained policy.

With an SFT phase in the config (grpo.sft.epochs > 0) each fold trains twice:
"sft" (SFT alone, grpo.steps = 0: the QuReTeC-style term classifier trained
on human rewrites) and "sft+grpo" (the config as it is); otherwise once,
"grpo". Runs go N at a time (--jobs); a failed run does not stop the others.

It prints one table per metric (Recall@10, NDCG@3, MRR, HSER reward; mean with
a 95% bootstrap interval over conversations, and for the rewriters the paired
difference against raw with its p-value) and the share of the raw → human
rewrite Recall@10 gap each policy closes, and writes transfer.json,
transfer.md and transfer.png to <out>.

--recipes sft,grpo,sft+grpo names the recipes instead: "sft" is SFT alone
(grpo.steps 0), "grpo" GRPO from the raw question without human rewrites
(grpo.sft.epochs 0), "sft+grpo" the config's SFT then GRPO; each fold and
seed trains each from the same data and seed. It adds a table and
recipes.png of every recipe against SFT alone, paired by turn (Recall@10 and
NDCG@3: each turn's value the mean over the seeds both finished, with a 95%
paired cluster-bootstrap interval over the left-out conversations).

Model selection: with data.dev_fraction > 0 each run carves an in-domain dev
split (by conversation, seeded) out of its training collections; training
evaluates and picks its best checkpoint on it, and the left-out collection is
evaluated with that best checkpoint. Without it the left-out collection is
evaluated with the latest checkpoint, never the best (which was picked on it).

--seeds 1,2,3 trains every recipe once per seed ("sft seed 2", ...) and adds
a table of each recipe over its seeds: the gap closed as mean ± sd with a
Student-t interval and its range, Recall@10's mean ± sd. A fold's turns are
the same for every seed, so that spread is the training's alone.

--trainer-cmd runs each run's policy on a trainer server of its own (a run
needs a fresh policy, and its evaluation the checkpoints it saved): the
command is started with sh -c before the run's training, {port_file} and
{checkpoint_dir} replaced by paths beside the run, and stopped after its
evaluation; both get trainer.endpoint=http://127.0.0.1:PORT. E.g.
  --trainer-cmd 'python -m lora_trainer --backend tagger --port 0 --port-file {port_file} --checkpoint-dir {checkpoint_dir}'
--folds runs only the named left-out collections (the others still train them).

--resume continues a transfer that stopped, or extends one (more --seeds,
more --folds): a run whose training finished and whose evaluation was
written after is kept when it ran with the config this transfer gives it
(another config is an error naming the changed keys); any other existing run
is resumed with "himes train --resume", then evaluated. The tables cover
every run, kept or new.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if jobs < 1 {
				return fmt.Errorf("--jobs must be ≥ 1, got %d", jobs)
			}
			if trainerTimeout <= 0 {
				return fmt.Errorf("--trainer-start-timeout must be > 0, got %v", trainerTimeout)
			}
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-transfer")
			}
			recipeVariants, err := ablate.TransferRecipes(cfg, recipes)
			if err != nil {
				return err
			}
			variants, err := ablate.SeededVariants(recipeVariants, seeds)
			if err != nil {
				return err
			}
			folds, err := ablate.PlanTransfer(cfg, collections, variants, out)
			if err != nil {
				return err
			}
			if folds, err = ablate.SelectFolds(folds, only); err != nil {
				return err
			}
			prog, finish := runProgress(cmd, "transfer")
			defer finish()
			return ablate.Transfer(cmd.Context(), cmd.OutOrStdout(), cfg, folds, ablate.TransferOptions{ConfigPath: cf.path, Sets: cf.sets,
				Jobs: jobs, Overwrite: overwrite, Resume: resume, Out: out, TrainerCmd: trainerCmd, TrainerTimeout: trainerTimeout, Recipes: len(recipes) > 0, Progress: prog})
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringSliceVar(&collections, "collections", nil, "the collections, comma-separated (each is left out once)")
	cmd.Flags().IntVar(&jobs, "jobs", 2, "training runs at once")
	cmd.Flags().IntSliceVar(&seeds, "seeds", nil, "repeat every recipe once per seed (run.seed), e.g. 1,2,3, and summarize each fold over them")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace the folds' existing run directories")
	cmd.Flags().BoolVar(&resume, "resume", false, "keep the runs that finished and were evaluated with this config, resume the others (e.g. add --seeds to a finished transfer)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default: <run.output_dir>/<run.name>-transfer)")
	cmd.Flags().StringVar(&trainerCmd, "trainer-cmd", "", "start this trainer server (sh -c; {port_file}, {checkpoint_dir}) for each run and use it as trainer.endpoint")
	cmd.Flags().DurationVar(&trainerTimeout, "trainer-start-timeout", 10*time.Minute, "how long a --trainer-cmd server may take to write its port")
	cmd.Flags().StringSliceVar(&recipes, "recipes", nil, "train these recipes in every fold and seed, each set against SFT alone: sft, grpo, sft+grpo (default: sft and sft+grpo with an SFT phase, else grpo, without that table)")
	cmd.Flags().StringSliceVar(&only, "folds", nil, "run only these left-out collections (names without extension; default all)")
	_ = cmd.MarkFlagRequired("collections")
	return cmd
}

// runProgress shows the runs of a sweep or transfer ended of their total:
// a bar on a terminal, a line as each run ends otherwise (runs take
// minutes). finish ends the bar of a batch stopped short.
func runProgress(cmd *cobra.Command, what string) (report ablate.RunProgress, finish func()) {
	var bar *progress.Bar
	report = func(ended, failed, total int) {
		if bar == nil {
			bar = progress.New(progressOutput(cmd), progress.Options{Label: what, Unit: "run", Total: total, EachItem: true})
		}
		detail := ""
		if failed > 0 {
			detail = fmt.Sprintf("(%d failed)", failed)
		}
		if ended > 0 {
			bar.Update(ended, detail, "failed", failed)
		}
	}
	finish = func() {
		if bar != nil {
			bar.Finish()
		}
	}
	return report, finish
}
