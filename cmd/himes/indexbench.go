package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/retrieval/indexbench"
)

func newIndexBenchCmd() *cobra.Command {
	p := indexbench.Params{Docs: 1_000_000, Vocab: 50_000, Len: 60, S: 1.07, Queries: 2000, Seed: 1}
	var dir, phase string
	var keep, memory bool
	cmd := &cobra.Command{
		Use:   "bench --docs N --dir DIR",
		Short: "Build and query an on-disk index of N synthetic Zipf passages, reporting throughput, memory and latency",
		Long: `Writes DIR/kb.jsonl (N Zipf passages, streamed), then in separate child
processes (so each peak RSS is its own): builds the on-disk index
(docs/s, peak RSS from VmHWM, index size), and opens it and runs the
queries (open time, RSS after open and after the queries, p50/p99 latency
of top-10 searches). --memory also builds the in-memory index.bin from the
same KB for comparison. The machine's load average is printed alongside.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := p.Validate(); err != nil {
				return err
			}
			if p.Format != "jsonl" && p.Format != "parquet" {
				return fmt.Errorf("index bench: --kb-format %q: want jsonl or parquet", p.Format)
			}
			if phase != "" {
				return indexbench.RunPhase(cmd.Context(), cmd.OutOrStdout(), phase, dir, p)
			}
			return indexbench.Run(cmd.Context(), cmd.OutOrStdout(), os.Args[0], dir, p, keep, memory)
		},
	}
	f := cmd.Flags()
	f.IntVar(&p.Docs, "docs", p.Docs, "passages")
	f.IntVar(&p.Vocab, "vocab", p.Vocab, "vocabulary size")
	f.IntVar(&p.Len, "len", p.Len, "mean words per passage")
	f.Float64Var(&p.S, "s", p.S, "Zipf exponent")
	f.IntVar(&p.Queries, "queries", p.Queries, "queries (2..8 terms, skipping the 20 most frequent)")
	f.Uint64Var(&p.Seed, "seed", p.Seed, "corpus seed (queries use seed+1)")
	f.IntVar(&p.Block, "block-docs", 0, "documents per sorted run (0: the default)")
	f.StringVar(&p.Scoring, "scoring", "exact", "retrieval.scoring of the index: exact or lucene (Pyserini parity)")
	f.StringVar(&p.Format, "kb-format", "jsonl", "format of the generated KB: jsonl or parquet (the same passages)")
	f.StringVar(&dir, "dir", "", "work directory (required; needs room for the KB and the index)")
	f.BoolVar(&keep, "keep", false, "keep the KB and the index")
	f.BoolVar(&memory, "memory", false, "also build the in-memory index (index.bin) for comparison")
	f.StringVar(&phase, "phase", "", "internal: run one phase in this process")
	_ = f.MarkHidden("phase")
	_ = cmd.MarkFlagRequired("dir")
	return cmd
}
