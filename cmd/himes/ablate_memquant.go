package main

import (
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
)

func newAblateMemQuantCmd() *cobra.Command {
	var (
		cf        configFlags
		data      []string
		rewriter  string
		out       string
		resamples int
		level     float64
	)
	cmd := &cobra.Command{
		Use:   "memory-quant --config X [--data a.jsonl,b.jsonl]",
		Short: "Quantize the memory embeddings at 8/4/2/1 bits, with and without a random rotation, and measure what changes",
		Long: `memory-quant holds the retrieval pipeline of the config fixed (long-term
memory on) and swaps only the memory embeddings: float32, then scalar
quantization at 8, 4, 2 and 1 bits, each with and without a random
orthogonal rotation (seeded by run.seed) before quantizing. Activation
scores the codes; the activated memories re-rank with their decoded vectors.

Per data set (--data, default data.train) and variant it reports the bytes
per memory embedding, the agreement with float32 (overlap@k of the final
top-k, Kendall τ-b over the re-ranked candidates, overlap of the activated
memories, share of turns whose re-rank decision flips) and the change in
R@10, NDCG@3 (judged turns) and memory_recall (turns with memory labels),
each a paired difference with a 95% cluster-bootstrap interval over
conversations. It writes memquant.json, memquant.md and one PNG per data set
to --out.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			cfg, err := cf.load()
			if err != nil {
				return err
			}
			st := stats.Config{Resamples: resamples, Level: level, Seed: uint64(cfg.Run.Seed)}
			if err := st.Validate(); err != nil {
				return fmt.Errorf("--resamples/--level: %w", err)
			}
			var rw evaluate.Rewriter
			switch rewriter {
			case "raw":
				rw = evaluate.Raw{}
			case "gold":
				rw = evaluate.Gold{}
			default:
				return fmt.Errorf("--rewriter %q: want raw or gold", rewriter)
			}
			if !cfg.Retrieval.Memory.Enabled {
				slog.Info("memory-quant: turning retrieval.memory.enabled on")
				cfg.Retrieval.Memory.Enabled = true
			}
			if len(data) == 0 {
				data = []string{cfg.Data.Train}
			}
			if _, err := dataSetNames(data); err != nil {
				return err
			}
			if out == "" {
				out = filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-memquant")
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
			var sets []ablate.MemQuantSet
			for _, path := range data {
				turns, _, err := datasets.LoadContext(ctx, path, cfg.Data.LoadOptions())
				if err != nil {
					return fmt.Errorf("--data: %w", err)
				}
				if len(turns) == 0 {
					return fmt.Errorf("--data %s: no turns", path)
				}
				if err := comp.attachMemory(ctx, cfg, dedupTurns(comp.known, turns)); err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				set, err := ablate.MemQuant(ctx, ablate.MemQuantInput{Data: path, Turns: turns, Pipeline: comp.Retriever,
					Retrieve: comp.Retrieve, Rewriter: rw, Seed: uint64(cfg.Run.Seed), Stats: st})
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				sets = append(sets, set)
			}
			return ablate.WriteMemQuant(cmd.OutOrStdout(), out, sets)
		},
	}
	cf.register(cmd, true)
	cmd.Flags().StringSliceVar(&data, "data", nil, "conversation files, each measured on its own (default: data.train)")
	cmd.Flags().StringVar(&rewriter, "rewriter", "raw", "the rewrite retrieval runs on: raw (the question) or gold (the human rewrite)")
	cmd.Flags().StringVarP(&out, "out", "o", "", "output directory (default: <run.output_dir>/<run.name>-memquant)")
	cmd.Flags().IntVar(&resamples, "resamples", 2000, "bootstrap resamples")
	cmd.Flags().Float64Var(&level, "level", 0.95, "confidence level of the intervals")
	return cmd
}
