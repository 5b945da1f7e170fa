package main

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/internal/progress"
	"github.com/himes-rl/himes/retrieval"
)

func newIndexCmd() *cobra.Command {
	cmd := &cobra.Command{Use: "index", Short: "Build and inspect the persisted BM25 index, or push the KB into a search cluster"}
	cmd.AddCommand(newIndexBuildCmd(), newIndexInfoCmd(), newIndexBenchCmd(), newIndexPushCmd())
	return cmd
}

func newIndexBuildCmd() *cobra.Command {
	cfg := retrieval.DefaultConfig()
	var kb, out string
	var disk bool
	var blockDocs int
	cmd := &cobra.Command{
		Use:   "build --kb FILE --out DIR",
		Short: "Build the BM25 index of a knowledge base (JSONL or Parquet) and save it",
		Long: `Chunks the knowledge base, builds the Lucene-BM25 inverted index and writes
DIR/index.bin (versioned, SHA-256 checked, bound to the KB's fingerprint) and
DIR/meta.json. Point retrieval.index at DIR; the same k1, b and chunking must
be configured there, or the index is refused.

With --disk it writes DIR/index.disk instead: postings, ids, terms and the
chunks' texts laid out to be memory-mapped, built streaming (the KB is read
twice, never held in memory) with sorted runs spilled to DIR and merged.
A pipeline pointed at it opens in milliseconds and reads chunk texts from
it instead of loading the KB.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := cfg.Validate(); err != nil {
				return fmt.Errorf("index build: %w", err)
			}
			if blockDocs < 0 || (blockDocs != 0 && !disk) {
				return fmt.Errorf("index build: --block-docs %d: must be ≥ 0 and applies only with --disk", blockDocs)
			}
			start := time.Now()
			var meta retrieval.IndexMeta
			var err error
			slog.Info("index build", "kb", kb, "out", out, "disk", disk)
			prog := newStageProgress(progressOutput(cmd), "index build", map[string]string{"scan": "MiB", "index": "chunk", "analyze": "chunk", "merge": "term"})
			if disk {
				meta, err = retrieval.BuildDiskIndex(cmd.Context(), cfg, kb, out, retrieval.DiskBuildOptions{BlockDocs: blockDocs, Progress: prog.update})
			} else {
				meta, err = retrieval.BuildIndexDirProgress(cmd.Context(), cfg, kb, out, prog.update)
			}
			prog.finish()
			if err != nil {
				return err
			}
			el := time.Since(start)
			slog.Info("index built", "dir", out, "docs", meta.Docs, "terms", meta.Terms, "postings", meta.Postings,
				"elapsed_s", math.Round(el.Seconds()*1000)/1000)
			fmt.Fprintf(cmd.OutOrStdout(), "built %s: %d chunks, %d terms, %d postings in %s\n",
				out, meta.Docs, meta.Terms, meta.Postings, el.Round(time.Millisecond))
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&kb, "kb", "", "knowledge base: JSONL or Parquet with id, title, text (required)")
	f.StringVar(&out, "out", "", "output directory (required)")
	f.Float64Var(&cfg.K1, "k1", cfg.K1, "BM25 k1")
	f.Float64Var(&cfg.B, "b", cfg.B, "BM25 b")
	f.StringVar(&cfg.Analyzer, "analyzer", cfg.Analyzer, "plain (reference tokenization), english (Snowball stopwords + stemming) or lucene-english (Pyserini's default)")
	f.StringVar(&cfg.Scoring, "scoring", cfg.Scoring, "exact (float64 BM25) or lucene (Lucene's float32 scores, as Pyserini)")
	f.IntVar(&cfg.ChunkWords, "chunk-words", cfg.ChunkWords, "words per chunk (0: one chunk per passage)")
	f.IntVar(&cfg.ChunkStride, "chunk-stride", cfg.ChunkStride, "words between chunk starts (1..chunk-words)")
	f.BoolVar(&disk, "disk", false, "write the memory-mapped on-disk index (index.disk) with a streaming build")
	f.IntVar(&blockDocs, "block-docs", 0, "with --disk: chunks per sorted run, bounding build memory (0: 32768)")
	_ = cmd.MarkFlagRequired("kb")
	_ = cmd.MarkFlagRequired("out")
	return cmd
}

func newIndexInfoCmd() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "info DIR",
		Short: "Verify a persisted index (every section of an on-disk one) and print what it was built from",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			var meta retrieval.IndexMeta
			var secs []retrieval.SectionSize
			var err error
			if retrieval.HasDiskIndex(args[0]) {
				meta, secs, err = verifyDisk(cmd, args[0])
			} else {
				meta, err = retrieval.ReadIndexMeta(args[0])
			}
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(w)
				enc.SetIndent("", "  ")
				return enc.Encode(meta)
			}
			layout := "index.bin"
			if meta.Layout == "disk" {
				layout = "index.disk, every section"
			}
			fmt.Fprintf(w, "index          %s (%s format v%d, checksum ok)\n", args[0], layout, meta.FormatVersion)
			fmt.Fprintf(w, "knowledge base %s\n", meta.KBPath)
			fmt.Fprintf(w, "kb sha256      %s\n", meta.KBFingerprint)
			fmt.Fprintf(w, "analyzer       %s\n", meta.Analyzer)
			fmt.Fprintf(w, "bm25           k1=%v b=%v scoring=%s\n", meta.Params.K1, meta.Params.B, normScoringName(meta.Params.Scoring))
			fmt.Fprintf(w, "chunking       words=%d stride=%d\n", meta.ChunkWords, meta.ChunkStride)
			fmt.Fprintf(w, "documents      %d (avg %.1f tokens)\n", meta.Docs, meta.AvgDocLen)
			fmt.Fprintf(w, "terms          %d\n", meta.Terms)
			fmt.Fprintf(w, "postings       %d\n", meta.Postings)
			fmt.Fprintf(w, "built          %s\n", meta.Built.Format(time.RFC3339))
			fmt.Fprintf(w, "file sha256    %s\n", meta.Checksum)
			for _, sec := range secs {
				fmt.Fprintf(w, "  %-22s %12d bytes\n", sec.Name, sec.Bytes)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the metadata as JSON")
	return cmd
}

// normScoringName shows the scoring of an index written before scoring was
// recorded (all of them exact) as exact.
func normScoringName(s string) string {
	if s == "" {
		return retrieval.ScoringExact
	}
	return s
}

// verifyDisk opens an on-disk index and checks every byte of it.
func verifyDisk(cmd *cobra.Command, dir string) (retrieval.IndexMeta, []retrieval.SectionSize, error) {
	ix, meta, err := retrieval.OpenDiskIndex(dir)
	if err != nil {
		return meta, nil, err
	}
	defer ix.Close()
	if err := retrieval.VerifyDiskIndex(cmd.Context(), ix); err != nil {
		return meta, nil, err
	}
	return meta, ix.Sections(), nil
}

// stageProgress shows a work of several stages, each counted toward its
// own total: one progress bar (or a few log lines) per stage.
type stageProgress struct {
	out   *progress.Output
	what  string
	units map[string]string // stage → its unit
	stage string
	bar   *progress.Bar
}

func newStageProgress(out *progress.Output, what string, units map[string]string) *stageProgress {
	return &stageProgress{out: out, what: what, units: units}
}

func (p *stageProgress) update(stage string, done, total int) {
	if p.bar == nil || stage != p.stage {
		p.finish()
		p.stage = stage
		// what was done before the first report is shown, not timed
		p.bar = progress.New(p.out, progress.Options{Label: p.what + ": " + stage, Unit: p.units[stage], Total: total, Done: done})
	}
	p.bar.Update(done, "")
}

func (p *stageProgress) finish() {
	if p.bar != nil {
		p.bar.Finish()
		p.bar = nil
	}
}
