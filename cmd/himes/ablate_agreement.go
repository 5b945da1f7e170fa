package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/trainer"
)

func newAblateAgreementCmd() *cobra.Command {
	var (
		cf          configFlags
		data        []string
		samples     int
		samplesOnly bool
		out         string
	)
	cmd := &cobra.Command{
		Use:   "reward-agreement --config X --data a.jsonl,b.jsonl",
		Short: "How well each reward ranks a turn's rewrites the way retrieval does (within-group rank correlation with Recall@10 and NDCG@3)",
		Long: `reward-agreement measures, per judged turn of each --data file, a group of
distinct rewrites: the raw question, the earlier user turns + question, the
human rewrite, and --samples rewrites sampled from the config's policy at
grpo.temperature (seeded by run.seed). Each rewrite is retrieved with the
config's pipeline, answered by its responder and scored by three rewards:
HSER with hit=gold, HSER with hit=answer (reward.alpha, reward.beta,
reward.tokenizer as configured) and ConvSearch-R1's rank reward of the first
relevant passage. Per (reward, metric) it reports the mean within-group
Kendall τ-b and Spearman ρ with the rewrite's Recall@10 and NDCG@3 over the
groups where both vary, how often the reward is constant while the metric
varies, and each reward's zero-variance share. It writes agreement.json and
agreement.md to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			if samples < 0 {
				return fmt.Errorf("--samples must be ≥ 0, got %d", samples)
			}
			if samplesOnly && samples < 2 {
				return fmt.Errorf("--samples-only needs --samples ≥ 2, got %d", samples)
			}
			if len(data) == 0 {
				data = []string{cfg.Data.Train}
			}
			names, err := dataSetNames(data)
			if err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-agreement")
			}
			// retrieval.ollama_url "launch": the embedder's Ollama server,
			// its log beside the output.
			rc, lo, err := launchOllamaFor(cmd, cfg.Retrieval, filepath.Clean(out)+"."+ollamaLogName)
			if err != nil {
				return err
			}
			defer func() { err = lo.finish(err) }()
			cfg.Retrieval = rc
			ctx := cmd.Context()
			comp, err := buildComponents(ctx, cfg, buildOptions{})
			if err != nil {
				return err
			}
			defer comp.Close()
			render := func(ctx context.Context, t datasets.Turn) (trainer.Prompt, error) {
				p, err := comp.Renderer.RenderContext(ctx, t)
				if err != nil {
					return trainer.Prompt{}, err
				}
				return trainer.PromptFromRendered(t.ID(), p), nil
			}
			var sets []ablate.AgreementSet
			for i, path := range data {
				turns, _, err := datasets.LoadContext(ctx, path, cfg.Data.LoadOptions())
				if err != nil {
					return fmt.Errorf("--data: %w", err)
				}
				if err := comp.attachMemory(ctx, cfg, dedupTurns(comp.known, turns)); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				in := ablate.AgreementInput{Name: names[i], Data: path,
					Turns: turns, Retrieve: comp.Retrieve, Responder: comp.Responder, Reward: cfg.Reward}
				in.SamplesOnly = samplesOnly
				if samples > 0 {
					in.Sample = ablate.PolicySampler(comp.Policy, render, samples, cfg.GRPO.Temperature, cfg.GRPO.MaxTokens, cfg.Run.Seed, 64)
					in.SampleLabel = fmt.Sprintf("%d policy samples (T=%g)", samples, cfg.GRPO.Temperature)
				}
				set, _, err := ablate.MeasureAgreement(ctx, in)
				if err != nil {
					return err
				}
				sets = append(sets, set)
			}
			return ablate.WriteAgreement(cmd.OutOrStdout(), out, sets)
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringSliceVar(&data, "data", nil, "conversation files, each measured on its own (default: data.train)")
	cmd.Flags().IntVar(&samples, "samples", 8, "policy samples per turn added to each group (0: raw, concat and human rewrite only)")
	cmd.Flags().BoolVar(&samplesOnly, "samples-only", false, "groups of the policy's samples only (distinct ones), as GRPO groups are")
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default: <run.output_dir>/<run.name>-agreement)")
	return cmd
}
