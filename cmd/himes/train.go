package main

import (
	"fmt"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/rundir"
)

func newTrainCmd() *cobra.Command {
	var (
		cf                             configFlags
		resume, overwrite, allowChange bool
		repair                         bool
		prof                           profileFlags
	)
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train the rewriter: optional SFT, then GRPO steps",
		Long: `Train the query rewriter: an optional SFT phase through the trainer
endpoint, then GRPO steps (sample G rewrites per prompt, roll them out through
retrieval and the frozen responder, score with HSER, send group-normalized
advantages to the trainer). Outputs go to <run.output_dir>/<run.name>/:
config.yaml, version.json, status.json, metrics.jsonl, ledger/steps-*.parquet,
samples/step-*.parquet (each evaluation's sample rewrites), tb/ (TensorBoard
events, run.tensorboard), state/ and trainer/ checkpoints. One process at a
time uses a run directory (it holds a lock on it); --resume refuses a changed
config unless --allow-config-change. --resume of a finished run says
"already finished at step N", writes nothing and exits 0; with a larger
--set grpo.steps it continues to the new total.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			if resume && overwrite {
				return fmt.Errorf("--resume and --overwrite exclude each other")
			}
			if allowChange && !resume {
				return fmt.Errorf("--allow-config-change goes with --resume")
			}
			if repair && !resume {
				return fmt.Errorf("--repair goes with --resume")
			}
			stop, err := prof.start()
			if err != nil {
				return err
			}
			defer func() { err = stop(err) }()
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			mode := rundir.New
			switch {
			case resume:
				mode = rundir.Resume
			case overwrite:
				mode = rundir.Overwrite
			}
			// Refuse a wrong mode or a run in use at once, and load the data
			// and check the services before the run directory is touched: a
			// run that cannot start leaves nothing behind (and --overwrite
			// deletes nothing).
			base, name := cfg.Run.OutputDir, cfg.Run.Name
			if err := rundir.Check(base, name, mode); err != nil {
				return err
			}
			if resume {
				if err := checkConfigChange(filepath.Join(base, name), cfg, allowChange); err != nil {
					return err
				}
				done, err := resumeHasWork(cmd.OutOrStdout(), filepath.Join(base, name), cfg.GRPO)
				if err != nil || done {
					return err
				}
			}
			fault, err := faultFromEnv()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// trainer.endpoint "launch": start the reference trainer, stop it
			// at the end; its log joins the run directory then.
			lt, err := startLaunchedTrainer(ctx, cfg, filepath.Join(base, name), filepath.Join(base, name+".trainer.log"))
			if err != nil {
				return err
			}
			if lt != nil {
				lt.moveTo = filepath.Join(base, name, trainerLogName)
				defer func() { err = lt.finish(err) }()
				ctx = lt.watch(ctx)
			}
			// retrieval.ollama_url "launch": the same for the embedder's
			// Ollama server.
			lo, err := startLaunchedOllama(ctx, cfg.Retrieval, filepath.Join(base, name+"."+ollamaLogName))
			if err != nil {
				return err
			}
			if lo != nil {
				lo.moveTo = filepath.Join(base, name, ollamaLogName)
				defer func() { err = lo.finish(err) }()
				ctx = lo.watch(ctx)
			}
			comp, err := buildComponents(ctx, lo.config(lt.config(cfg)), buildOptions{trainerDir: filepath.Join(base, name, "trainer")})
			if err != nil {
				return err
			}
			defer comp.Close()
			// The loop's evaluations pick the best checkpoint: on the dev
			// split when there is one, so data.eval stays an untouched test set.
			loopEval := comp.Eval
			if cfg.Data.DevFraction > 0 {
				loopEval = comp.Dev
			}
			return grpo.Train(ctx, cfg.GRPO, grpo.Deps{
				Policy: comp.Policy, Runner: comp.Runner, Renderer: comp.Renderer, Ranker: comp.rankPassages,
				Train: comp.Train, Eval: loopEval, SFT: comp.SFT, Reward: cfg.Reward,
				Seed: cfg.Run.Seed, Logger: slog.Default(),
				Progress: newProgress(progressOutput(cmd), nil), Fault: fault,
			}, grpo.RunPlace{Base: base, Name: name, Mode: mode, TensorBoard: cfg.Run.TensorBoard, Repair: repair,
				Snapshot: func(run *rundir.RunDir) error { return snapshotRun(run, cfg) }})
		},
	}
	cf.register(cmd, true)
	prof.register(cmd)
	cmd.Flags().BoolVar(&resume, "resume", false, "continue the run in its existing directory from its newest checkpoint")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "delete an existing run directory of the same name first")
	cmd.Flags().BoolVar(&repair, "repair", false, "with --resume: continue past damaged run files (ledger files, metrics.jsonl, state/best.json) from the newest usable checkpoint, setting them aside and reporting what is lost in repair-N.json")
	cmd.Flags().BoolVar(&allowChange, "allow-config-change", false, "with --resume: continue even though the config differs from the run's")
	return cmd
}

// resumeHasWork reports whether a resume of the run in dir has nothing to
// do (done): its newest checkpoint is at or past grpo.steps with its
// evaluation recorded. Then it says so on w and the command exits 0
// without touching the run (no resume counted, no config.resume-N.yaml,
// version.resume-N.json or event file). A larger --set grpo.steps extends
// a finished run instead, as TRL's resume_from_checkpoint with a larger
// max_steps does; that is logged, with what it means for a decaying
// learning-rate schedule.
func resumeHasWork(w io.Writer, dir string, cfg grpo.Config) (done bool, err error) {
	p, err := grpo.ReadRunProgress(dir, cfg)
	if err != nil {
		return false, err
	}
	if p.Done {
		_, err := fmt.Fprintf(w, "%s: already finished at step %d (grpo.steps %d): nothing to do, nothing written; "+
			"to train further, resume with --set grpo.steps=N, N > %d\n", dir, p.Step, cfg.Steps, p.Step)
		return true, err
	}
	if p.Step >= 0 {
		// A checkpoint at the step the last session was to end at: that
		// session finished with a smaller grpo.steps.
		if st, ok, _ := grpo.ReadStatus(dir); ok && st.State == grpo.StateFinished && p.Step >= st.Steps {
			slog.Info("resume: extending the finished run", "from_step", p.Step, "to_step", cfg.Steps)
			if cfg.Optimizer.Schedule != "constant" {
				o := cfg.Optimizer
				slog.Warn("resume: the learning-rate schedule is recomputed over the new grpo.steps: the next step takes its rate there, not the continuation of the finished run's decay",
					"schedule", o.Schedule, "last_lr", o.LearningRate(cfg.LearningRate, p.Step, st.Steps),
					"next_lr", o.LearningRate(cfg.LearningRate, p.Step+1, cfg.Steps))
			}
		}
	}
	return false, nil
}
