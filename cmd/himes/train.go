package main

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/rundir"
)

func newTrainCmd() *cobra.Command {
	var (
		cf                             configFlags
		resume, overwrite, allowChange bool
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
config unless --allow-config-change.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if resume && overwrite {
				return fmt.Errorf("--resume and --overwrite exclude each other")
			}
			if allowChange && !resume {
				return fmt.Errorf("--allow-config-change goes with --resume")
			}
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
			}
			fault, err := faultFromEnv()
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			comp, err := buildComponents(ctx, cfg, buildOptions{trainerDir: filepath.Join(base, name, "trainer")})
			if err != nil {
				return err
			}
			defer comp.Close()
			return grpo.Train(ctx, cfg.GRPO, grpo.Deps{
				Policy: comp.Policy, Runner: comp.Runner, Renderer: comp.Renderer, Ranker: comp.rankPassages,
				Train: comp.Train, Eval: comp.Eval, SFT: comp.SFT, Reward: cfg.Reward.Weights,
				Seed: cfg.Run.Seed, Logger: slog.Default(),
				Progress: newProgress(os.Stderr, isInteractive(os.Stderr)), Fault: fault,
			}, grpo.RunPlace{Base: base, Name: name, Mode: mode, TensorBoard: cfg.Run.TensorBoard,
				Snapshot: func(run *rundir.RunDir) error { return snapshotRun(run, cfg) }})
		},
	}
	cf.register(cmd, true)
	cmd.Flags().BoolVar(&resume, "resume", false, "continue the run in its existing directory from its newest checkpoint")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "delete an existing run directory of the same name first")
	cmd.Flags().BoolVar(&allowChange, "allow-config-change", false, "with --resume: continue even though the config differs from the run's")
	return cmd
}
