package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/himes-rl/himes/configs"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/report"
	"github.com/himes-rl/himes/retrieval"
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

(aliases: alpha, beta, hit, tokenizer, stem, aggregation, estimator, std,
zero_variance). Points are the Cartesian product, first key outermost.`,
	}
	cmd.AddCommand(newAblateRescoreCmd(), newAblateSweepCmd(), newAblateTransferCmd(), newAblateMemQuantCmd())
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
			return runRescore(cmd.Context(), cmd.OutOrStdout(), args[0], grid, data, kb, out)
		},
	}
	cmd.Flags().StringVar(&grid, "grid", "", "grid file (YAML)")
	cmd.Flags().StringVar(&data, "data", "", "training data of the run (default: its config's data.train)")
	cmd.Flags().StringVar(&kb, "kb", "", "knowledge base of the run (default: its config's data.kb)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "JSON output (default: RUN_DIR/rescore.json)")
	_ = cmd.MarkFlagRequired("grid")
	return cmd
}

func runRescore(ctx context.Context, stdout io.Writer, runDir, gridPath, data, kb, out string) error {
	t0 := time.Now()
	cfg, err := configs.LoadRunSnapshot(runDir)
	if err != nil {
		return err
	}
	g, err := ablate.ReadGrid(gridPath)
	if err != nil {
		return err
	}
	settings, err := ablate.RescoreSettings(g, cfg)
	if err != nil {
		return err
	}
	recs, err := ablate.ReadRunLedgers(ctx, runDir)
	if err != nil {
		return err
	}
	if data == "" {
		data = cfg.Data.Train
	}
	if kb == "" {
		kb = cfg.Data.KB
	}
	turns, _, err := datasets.LoadContext(ctx, data, cfg.Data.LoadOptions())
	if err != nil {
		return fmt.Errorf("the run's training data (pass --data if it moved): %w", err)
	}
	if cfg.Data.Eval != "" {
		// Some runs draw prompts from both files; references may live in either.
		if more, _, err := datasets.LoadContext(ctx, cfg.Data.Eval, cfg.Data.LoadOptions()); err == nil {
			turns = append(turns, more...)
		}
	}
	k, err := retrieval.LoadKB(ctx, kb)
	if err != nil {
		return fmt.Errorf("the run's knowledge base (pass --kb if it moved): %w", err)
	}
	chunks, err := retrieval.ChunkPassages(k.Passages, cfg.Retrieval.ChunkWords, cfg.Retrieval.ChunkStride)
	if err != nil {
		return err
	}
	own := ablate.SettingOf("own", nil, cfg)
	slog.Info("rescoring", "run", runDir, "rollouts", len(recs), "settings", len(settings))
	res, err := ablate.Rescore(ctx, recs, ablate.NewMapLookup(turns, chunks), own, settings)
	if err != nil {
		return err
	}
	if out == "" {
		out = filepath.Join(runDir, "rescore.json")
	}
	if err := atomicfile.Write(out, 0o644, func(w io.Writer) error { return writeIndentedJSON(w, res) }); err != nil {
		return err
	}
	if err := ablate.WriteRescoreMarkdown(stdout, res); err != nil {
		return err
	}
	slog.Info("rescore written", "json", out, "elapsed_s", math.Round(time.Since(t0).Seconds()*100)/100)
	if res[0].MaxRewardDiff != 0 {
		slog.Warn("the run's own setting does not reproduce the logged rewards: the data, knowledge base or chunking differ from training",
			"max_reward_diff", res[0].MaxRewardDiff)
	}
	return nil
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
			if !resume && !overwrite {
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
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("sweep: locate the himes binary: %w", err)
			}
			logDir := filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-sweep")
			if err := os.MkdirAll(logDir, 0o755); err != nil {
				return fmt.Errorf("sweep: %w", err)
			}
			ctx := cmd.Context()
			slog.Info("sweep", "points", len(runs), "parallel", parallel, "logs", logDir)
			errs := ablate.RunSweep(ctx, runs, parallel, func(ctx context.Context, r ablate.SweepRun) error {
				args := []string{"train", "--config", cf.path, "--log-format", "json"}
				for _, s := range cf.sets {
					args = append(args, "--set", s)
				}
				for _, o := range r.Overrides {
					args = append(args, "--set", o)
				}
				args = append(args, "--set", "run.name="+r.RunName)
				if resume {
					args = append(args, "--resume")
				}
				if overwrite {
					args = append(args, "--overwrite")
				}
				return runSweepChild(ctx, exe, args, filepath.Join(logDir, r.RunName+".log"))
			})
			rows := ablate.GatherSweep(ctx, runs, errs)
			if out == "" {
				out = filepath.Join(logDir, "sweep.json")
			}
			if err := atomicfile.Write(out, 0o644, func(w io.Writer) error { return writeIndentedJSON(w, rows) }); err != nil {
				return err
			}
			if err := ablate.WriteSweepMarkdown(cmd.OutOrStdout(), rows); err != nil {
				return err
			}
			// Points repeated over run.seed: mean, sd and a t-interval per metric.
			if groups := ablate.GroupSeeds(rows, 0.95); groups != nil {
				seeds := filepath.Join(filepath.Dir(out), "sweep_seeds.json")
				if err := atomicfile.Write(seeds, 0o644, func(w io.Writer) error { return writeIndentedJSON(w, groups) }); err != nil {
					return err
				}
				if err := ablate.WriteSeedsMarkdown(cmd.OutOrStdout(), groups); err != nil {
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
			if withReport && len(dirs) > 0 {
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

// runSweepChild runs the binary with args, its stdout and stderr into logPath.
func runSweepChild(ctx context.Context, exe string, args []string, logPath string) error {
	lf, err := os.Create(logPath)
	if err != nil {
		return fmt.Errorf("sweep log: %w", err)
	}
	defer lf.Close()
	c := exec.CommandContext(ctx, exe, args...)
	c.Stdout, c.Stderr = lf, lf
	// No terminal: the child logs lines instead of drawing a progress bar.
	c.Env = append(os.Environ(), "CI=true")
	c.WaitDelay = 10 * time.Second
	if err := c.Run(); err != nil {
		return fmt.Errorf("himes %s: %w (see %s)", args[0], err, logPath)
	}
	return nil
}

func newAblateTransferCmd() *cobra.Command {
	var cf configFlags
	var collections []string
	var out string
	var jobs int
	var seeds []int
	var overwrite bool
	var trainerCmd string
	var trainerTimeout time.Duration
	var only []string
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
--folds runs only the named left-out collections (the others still train them).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-transfer")
			}
			variants, err := ablate.SeededVariants(ablate.TransferVariants(cfg), seeds)
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
			if !overwrite {
				for _, f := range folds {
					for _, r := range f.Runs {
						if _, err := os.Stat(r.RunDir); err == nil {
							return fmt.Errorf("transfer: run directory %s already exists (pass --overwrite to retrain)", r.RunDir)
						}
					}
				}
			}
			exe, err := os.Executable()
			if err != nil {
				return fmt.Errorf("transfer: locate the himes binary: %w", err)
			}
			ctx := cmd.Context()
			opts := datasets.LoadOptions{UserField: cfg.Data.UserField, SkipBad: cfg.Data.SkipBad}
			slog.Info("transfer", "folds", len(folds), "variants", len(folds[0].Runs), "jobs", jobs, "out", out)
			errs := ablate.RunTransfer(ctx, folds, jobs,
				func(ctx context.Context, f ablate.TransferFold) error {
					n, err := ablate.WriteFoldTrain(ctx, f, opts)
					if err == nil {
						slog.Info("transfer fold", "held_out", f.Name, "train_turns", n, "train", f.TrainAt)
					}
					return err
				},
				func(ctx context.Context, f ablate.TransferFold, r ablate.TransferRun) error {
					if err := os.MkdirAll(filepath.Dir(r.RunDir), 0o755); err != nil {
						return err
					}
					train := []string{"train", "--config", cf.path, "--log-format", "json", "--overwrite"}
					for _, s := range append(append([]string{}, cf.sets...), f.Overrides(r)...) {
						train = append(train, "--set", s)
					}
					logDir := filepath.Dir(r.RunDir)
					eval := []string{"eval", "--run", r.RunDir, "--rewriter", "raw,concat,gold,policy",
						"--out", r.EvalDir, "--log-format", "json"}
					if trainerCmd != "" {
						tp, err := ablate.StartTrainer(ctx, trainerCmd, filepath.Join(logDir, r.RunName+".trainer"),
							filepath.Join(logDir, r.RunName+".trainer.log"), trainerTimeout)
						if err != nil {
							return err
						}
						defer func() {
							if err := tp.Stop(); err != nil {
								slog.Warn("trainer exited with an error", "run", r.RunDir, "err", err)
							}
						}()
						train = append(train, "--set", "trainer.endpoint="+tp.URL)
						eval = append(eval, "--set", "trainer.endpoint="+tp.URL)
					}
					if err := runSweepChild(ctx, exe, train, filepath.Join(logDir, r.RunName+".train.log")); err != nil {
						return err
					}
					return runSweepChild(ctx, exe, eval, filepath.Join(logDir, r.RunName+".eval.log"))
				})
			rows := ablate.GatherTransfer(folds, errs)
			if err := atomicfile.Write(filepath.Join(out, "transfer.json"), 0o644, func(w io.Writer) error {
				return writeIndentedJSON(w, map[string]any{"folds": folds, "rows": rows})
			}); err != nil {
				return err
			}
			var md strings.Builder
			md.WriteString("# Leave-one-collection-out transfer\n\n![Recall@10 per left-out collection](transfer.png)\n\n")
			if err := ablate.WriteTransferMarkdown(&md, rows); err != nil {
				return err
			}
			if err := atomicfile.Write(filepath.Join(out, "transfer.md"), 0o644, func(w io.Writer) error {
				_, err := io.WriteString(w, md.String())
				return err
			}); err != nil {
				return err
			}
			if png, err := ablate.TransferPNG(rows); err != nil {
				slog.Warn("transfer plot not written", "err", err)
			} else if err := atomicfile.Write(filepath.Join(out, "transfer.png"), 0o644, func(w io.Writer) error {
				_, err := w.Write(png)
				return err
			}); err != nil {
				return err
			}
			if err := ablate.WriteTransferMarkdown(cmd.OutOrStdout(), rows); err != nil {
				return err
			}
			failed := 0
			for _, fe := range errs {
				for _, e := range fe {
					if e != nil {
						failed++
					}
				}
			}
			if failed > 0 {
				return fmt.Errorf("transfer: %d runs failed (logs in %s)", failed, out)
			}
			return nil
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringSliceVar(&collections, "collections", nil, "the collections, comma-separated (each is left out once)")
	cmd.Flags().IntVar(&jobs, "jobs", 2, "training runs at once")
	cmd.Flags().IntSliceVar(&seeds, "seeds", nil, "repeat every recipe once per seed (run.seed), e.g. 1,2,3, and summarize each fold over them")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace the folds' existing run directories")
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default: <run.output_dir>/<run.name>-transfer)")
	cmd.Flags().StringVar(&trainerCmd, "trainer-cmd", "", "start this trainer server (sh -c; {port_file}, {checkpoint_dir}) for each run and use it as trainer.endpoint")
	cmd.Flags().DurationVar(&trainerTimeout, "trainer-start-timeout", 10*time.Minute, "how long a --trainer-cmd server may take to write its port")
	cmd.Flags().StringSliceVar(&only, "folds", nil, "run only these left-out collections (names without extension; default all)")
	_ = cmd.MarkFlagRequired("collections")
	return cmd
}
