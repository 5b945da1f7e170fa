package main

import (
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/buildinfo"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

func newTrainCmd() *cobra.Command {
	var (
		cf                configFlags
		resume, overwrite bool
	)
	cmd := &cobra.Command{
		Use:   "train",
		Short: "Train the rewriter: optional SFT, then GRPO steps",
		Long: `Train the query rewriter: an optional SFT phase through the trainer
endpoint, then GRPO steps (sample G rewrites per prompt, roll them out through
retrieval and the frozen responder, score with HSER, send group-normalized
advantages to the trainer). Outputs go to <run.output_dir>/<run.name>/:
config.yaml, version.json, metrics.jsonl, ledger/step-*.parquet, state/ and
trainer/ checkpoints.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if resume && overwrite {
				return fmt.Errorf("--resume and --overwrite exclude each other")
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
			run, err := rundir.Open(cfg.Run.OutputDir, cfg.Run.Name, mode)
			if err != nil {
				return err
			}
			if err := snapshotRun(run, cfg); err != nil {
				return err
			}
			ctx := cmd.Context()
			comp, err := buildComponents(ctx, cfg, buildOptions{trainerDir: run.File("trainer")})
			if err != nil {
				return err
			}
			defer comp.Close()
			fault, err := faultFromEnv()
			if err != nil {
				return err
			}
			tr, err := grpo.NewLoop(cfg.GRPO, grpo.Deps{
				Policy: comp.Policy, Runner: comp.Runner, Renderer: comp.Renderer, Ranker: comp.rankPassages,
				Train: comp.Train, Eval: comp.Eval, SFT: comp.SFT, Reward: cfg.Reward.Weights,
				Run: run, Seed: cfg.Run.Seed, Logger: slog.Default(),
				Progress: newProgress(os.Stderr, isInteractive(os.Stderr)), Fault: fault,
			})
			if err != nil {
				return err
			}
			slog.Info("training", "run", run.Path, "steps", cfg.GRPO.Steps, "prompts", len(comp.Train),
				"eval_turns", len(comp.Eval), "group_size", cfg.GRPO.GroupSize, "resume", resume)
			if err := tr.Run(ctx, resume); err != nil {
				return err
			}
			if e, ok := comp.Policy.(*trainer.Embedded); ok {
				slog.Info("embedded policy weights", "weights", e.NamedWeights())
			}
			slog.Info("done", "metrics", run.File("metrics.jsonl"), "ledger", run.File("ledger"))
			return nil
		},
	}
	cf.register(cmd, true)
	cmd.Flags().BoolVar(&resume, "resume", false, "continue the run in its existing directory from its newest checkpoint")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "delete an existing run directory of the same name first")
	return cmd
}

// snapshotRun records what produced the run: the resolved config and the
// binary's version. On resume the originals are kept beside the new ones.
func snapshotRun(run *rundir.RunDir, cfg configs.Config) error {
	out, err := cfg.YAML()
	if err != nil {
		return fmt.Errorf("render config: %w", err)
	}
	name := "config.yaml"
	if _, err := os.Stat(run.File(name)); err == nil {
		name = "config.resumed.yaml"
	}
	if err := atomicfile.WriteFile(run.File(name), out, 0o644); err != nil {
		return err
	}
	return atomicfile.WriteJSON(run.File("version.json"), buildinfo.Current())
}
