package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/report"
	"github.com/himes-rl/himes/retrieval"
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
		RunE: func(cmd *cobra.Command, _ []string) error {
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
			if out == "" {
				out = filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-memquant")
			}
			ctx := cmd.Context()
			comp, err := buildComponents(ctx, cfg, buildOptions{})
			if err != nil {
				return err
			}
			var sets []memQuantSet
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
				set, err := runMemQuant(ctx, comp, turns, rw, uint64(cfg.Run.Seed), st)
				if err != nil {
					return fmt.Errorf("%s: %w", path, err)
				}
				set.Data = path
				set.Name = strings.TrimSuffix(filepath.Base(path), filepath.Ext(path))
				sets = append(sets, set)
			}
			return writeMemQuant(cmd.OutOrStdout(), out, sets)
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

// memQuantSet is one data set's rows, float32 first.
type memQuantSet struct {
	Name        string          `json:"name"`
	Data        string          `json:"data"`
	Rewriter    string          `json:"rewriter"`
	Turns       int             `json:"turns"`
	Skipped     int             `json:"skipped_turns"` // the rewriter failed on them
	Judged      int             `json:"judged_turns"`
	Labelled    int             `json:"labelled_turns"`
	TopK        int             `json:"top_k"`
	Dim         int             `json:"dim"`
	Memories    int             `json:"memories"`
	Rows        []memQuantRow   `json:"rows"`
	FloatR10    *stats.Estimate `json:"float32_recall_10,omitempty"`
	FloatNDCG3  *stats.Estimate `json:"float32_ndcg_3,omitempty"`
	FloatMemRec *stats.Estimate `json:"float32_memory_recall,omitempty"`
}

// memQuantRow is one variant measured against float32 (whose own row has
// agreement 1 and differences 0).
type memQuantRow struct {
	Variant        string `json:"variant"`
	Bits           int    `json:"bits"` // 32 for float32
	Rotate         bool   `json:"rotate"`
	BytesPerMemory int    `json:"bytes_per_memory"`
	// OverlapK is the mean share of float32's final top-k that the variant
	// keeps; TauB the mean Kendall τ-b of the candidates' final scores
	// (turns where either ranking is constant are left out: TauTurns);
	// MemOverlap the mean share of float32's activated memories the
	// variant activates; DecisionFlips the share of turns where one
	// re-ranks and the other does not (the floor).
	OverlapK      float64           `json:"overlap_at_k"`
	TauB          float64           `json:"kendall_tau_b"`
	TauTurns      int               `json:"tau_turns"`
	MemOverlap    float64           `json:"memory_overlap"`
	DecisionFlips float64           `json:"rerank_decision_flips"`
	DeltaR10      *stats.Comparison `json:"delta_recall_10,omitempty"`
	DeltaNDCG3    *stats.Comparison `json:"delta_ndcg_3,omitempty"`
	DeltaMemRec   *stats.Comparison `json:"delta_memory_recall,omitempty"`
}

// memQuantTurn is what one turn gave under one variant.
type memQuantTurn struct {
	final    []string
	scores   map[string]float64
	memories []string
	reranked bool
	r10, n3  float64 // NaN when the turn is not judged
	memRec   float64 // NaN when the turn has no memory labels
}

// runMemQuant runs the turns' second stage under float32 and every
// quantized variant of the attached memory (the first stage is shared: it
// does not depend on memory), and restores the float32 memory after.
func runMemQuant(ctx context.Context, comp *components, turns []datasets.Turn, rw evaluate.Rewriter, seed uint64, st stats.Config) (memQuantSet, error) {
	p := comp.Retriever
	causal, ok := comp.Retrieve.(*retrieval.CausalRetriever)
	base := p.Memory()
	if !ok || base == nil {
		return memQuantSet{}, errors.New("memory-quant: long-term memory is not attached")
	}
	defer func() { _ = p.SetMemory(base) }()
	dim := 0
	for _, e := range base.Entries() {
		dim = len(e.Embedding)
		break
	}
	if dim == 0 {
		return memQuantSet{}, errors.New("memory-quant: the data give no memories")
	}
	// As in himes eval, a turn the rewriter fails on (gold without a human
	// rewrite) is left out of every variant, and counted.
	var reqs []retrieval.Request
	var texts []string
	var kept []datasets.Turn
	skipped := 0
	for _, t := range turns {
		rewrite, err := rw.Rewrite(ctx, t)
		if err != nil {
			skipped++
			slog.Warn("memory-quant: turn left out", "turn", t.ID(), "rewriter", rw.Name(), "err", err)
			continue
		}
		kept = append(kept, t)
		reqs = append(reqs, retrieval.Request{User: t.User, Rewrite: rewrite, Query: t.Question, Seq: causal.Position(t.User, t.Question)})
		text := rewrite
		if strings.TrimSpace(text) == "" {
			text = t.Question
		}
		texts = append(texts, text)
	}
	if len(kept) == 0 {
		return memQuantSet{}, fmt.Errorf("memory-quant: rewriter %s failed on every turn", rw.Name())
	}
	turns = kept
	cands, errs := p.SearchBatch(ctx, texts, p.Config().Candidates)
	for i, err := range errs {
		if err != nil {
			return memQuantSet{}, fmt.Errorf("turn %s: first-stage search: %w", turns[i].ID(), err)
		}
	}
	variants := []*memory.Quantizer{nil}
	for _, bits := range memory.QuantBits {
		for _, rot := range []bool{false, true} {
			q, err := memory.NewQuantizer(bits, dim, rot, seed)
			if err != nil {
				return memQuantSet{}, err
			}
			variants = append(variants, q)
		}
	}
	set := memQuantSet{Turns: len(turns), Skipped: skipped, Rewriter: rw.Name(), TopK: p.Config().TopK, Dim: dim, Memories: base.Len()}
	per := make([][]memQuantTurn, len(variants))
	for v, q := range variants {
		store := base
		if q != nil {
			var err error
			if store, err = base.Quantized(q); err != nil {
				return memQuantSet{}, err
			}
		}
		if err := p.SetMemory(store); err != nil {
			return memQuantSet{}, err
		}
		per[v] = make([]memQuantTurn, len(turns))
		for i, t := range turns {
			res, ranked, err := p.RerankCandidates(ctx, reqs[i], cands[i])
			if err != nil {
				return memQuantSet{}, fmt.Errorf("turn %s: %w", t.ID(), err)
			}
			per[v][i] = measureTurn(t, res, ranked)
		}
		name := "float32"
		if q != nil {
			name = q.Name()
		}
		slog.Info("memory-quant variant done", "variant", name, "turns", len(turns))
	}
	convs := conversationsOf(turns)
	metric := func(v int, f func(memQuantTurn) float64) [][]float64 {
		out := make([][]float64, len(convs))
		for c, idx := range convs {
			for _, i := range idx {
				out[c] = append(out[c], f(per[v][i]))
			}
		}
		return out
	}
	r10 := func(t memQuantTurn) float64 { return t.r10 }
	n3 := func(t memQuantTurn) float64 { return t.n3 }
	memRec := func(t memQuantTurn) float64 { return t.memRec }
	for _, t := range per[0] {
		if !math.IsNaN(t.r10) {
			set.Judged++
		}
		if !math.IsNaN(t.memRec) {
			set.Labelled++
		}
	}
	estimate := func(f func(memQuantTurn) float64) *stats.Estimate {
		e, err := stats.Bootstrap(metric(0, f), st)
		if err != nil {
			return nil
		}
		return &e
	}
	if set.Judged > 0 {
		set.FloatR10, set.FloatNDCG3 = estimate(r10), estimate(n3)
	}
	if set.Labelled > 0 {
		set.FloatMemRec = estimate(memRec)
	}
	for v, q := range variants {
		row := memQuantRow{Variant: "float32", Bits: 32, BytesPerMemory: 4 * dim}
		if q != nil {
			row = memQuantRow{Variant: q.Name(), Bits: q.Bits, Rotate: q.Rotate, BytesPerMemory: q.BytesPerVector()}
		}
		agreement(&row, per[0], per[v])
		paired := func(f func(memQuantTurn) float64) (*stats.Comparison, error) {
			c, err := stats.Paired(metric(v, f), metric(0, f), st)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", row.Variant, err)
			}
			return &c, nil
		}
		var err error
		if set.Judged > 0 {
			if row.DeltaR10, err = paired(r10); err != nil {
				return memQuantSet{}, err
			}
			if row.DeltaNDCG3, err = paired(n3); err != nil {
				return memQuantSet{}, err
			}
		}
		if set.Labelled > 0 {
			if row.DeltaMemRec, err = paired(memRec); err != nil {
				return memQuantSet{}, err
			}
		}
		set.Rows = append(set.Rows, row)
	}
	return set, nil
}

func measureTurn(t datasets.Turn, res retrieval.Result, ranked []retrieval.Ranked) memQuantTurn {
	m := memQuantTurn{scores: make(map[string]float64, len(ranked)), reranked: res.Trace.Reranked,
		r10: math.NaN(), n3: math.NaN(), memRec: math.NaN()}
	for _, c := range res.Chunks {
		m.final = append(m.final, c.ID)
	}
	for _, c := range ranked {
		m.scores[c.ID] = c.Score
	}
	for _, mm := range res.Trace.Memories {
		m.memories = append(m.memories, mm.ID)
	}
	if q := t.Qrels(); len(q) > 0 {
		run := evaluate.PipelineRun(res)
		m.r10, m.n3 = retrieval.Recall(run, q, 10), retrieval.NDCGCut(run, q, 3)
	}
	if len(t.MemoryLabels) > 0 {
		_, m.memRec, _ = evaluate.MemoryActivation(m.memories, t.MemoryLabels)
	}
	return m
}

// agreement fills row's agreement of variant turns vs float32 turns.
func agreement(row *memQuantRow, base, v []memQuantTurn) {
	var ov, mem, flips float64
	var nOv, nMem int
	var tau float64
	for i := range base {
		b, q := base[i], v[i]
		if len(b.final) > 0 {
			ov += float64(overlap(b.final, q.final)) / float64(len(b.final))
			nOv++
		}
		if len(b.memories) > 0 {
			mem += float64(overlap(b.memories, q.memories)) / float64(len(b.memories))
			nMem++
		}
		if b.reranked != q.reranked {
			flips++
		}
		x := make([]float64, 0, len(b.scores))
		y := make([]float64, 0, len(b.scores))
		for id, s := range b.scores {
			if s2, ok := q.scores[id]; ok {
				x, y = append(x, s), append(y, s2)
			}
		}
		if t, ok, err := stats.KendallTauB(x, y); err == nil && ok {
			tau += t
			row.TauTurns++
		}
	}
	row.OverlapK, row.MemOverlap, row.TauB = nanDiv(ov, nOv), nanDiv(mem, nMem), nanDiv(tau, row.TauTurns)
	row.DecisionFlips = nanDiv(flips, len(base))
}

func nanDiv(s float64, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return s / float64(n)
}

func overlap(a, b []string) int {
	n := 0
	for _, x := range a {
		for _, y := range b {
			if x == y {
				n++
				break
			}
		}
	}
	return n
}

// conversationsOf groups turn indexes by conversation, in first-seen order.
func conversationsOf(turns []datasets.Turn) [][]int {
	pos := map[string]int{}
	var out [][]int
	for i, t := range turns {
		c, ok := pos[t.ConvID]
		if !ok {
			c = len(out)
			pos[t.ConvID] = c
			out = append(out, nil)
		}
		out[c] = append(out[c], i)
	}
	return out
}

func writeMemQuant(stdout io.Writer, out string, sets []memQuantSet) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("memory-quant: %w", err)
	}
	if err := atomicfile.Write(filepath.Join(out, "memquant.json"), 0o644, func(w io.Writer) error {
		return writeIndentedJSON(w, sets)
	}); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# Quantized memory embeddings\n\n")
	for _, s := range sets {
		png := "memquant-" + s.Name + ".png"
		fmt.Fprintf(&md, "![agreement with float32, %s](%s)\n\n", s.Name, png)
		writeMemQuantTable(&md, s)
		chart, err := memQuantChart(s)
		if err != nil {
			return err
		}
		if err := atomicfile.Write(filepath.Join(out, png), 0o644, func(w io.Writer) error {
			_, err := w.Write(chart)
			return err
		}); err != nil {
			return err
		}
	}
	if err := atomicfile.Write(filepath.Join(out, "memquant.md"), 0o644, func(w io.Writer) error {
		_, err := io.WriteString(w, md.String())
		return err
	}); err != nil {
		return err
	}
	_, err := io.WriteString(stdout, md.String())
	slog.Info("memory-quant written", "dir", out)
	return err
}

func writeMemQuantTable(w io.Writer, s memQuantSet) {
	fmt.Fprintf(w, "## %s, rewriter %s (%d turns, %d judged, %d with memory labels; %d left out; %d memories, %d dims, top_k %d)\n\n",
		s.Name, s.Rewriter, s.Turns, s.Judged, s.Labelled, s.Skipped, s.Memories, s.Dim, s.TopK)
	base := func(e *stats.Estimate) string {
		if e == nil {
			return "–"
		}
		return fmt.Sprintf("%.3f", e.Mean)
	}
	fmt.Fprintf(w, "float32: R@10 %s, NDCG@3 %s, memory_recall %s\n\n", base(s.FloatR10), base(s.FloatNDCG3), base(s.FloatMemRec))
	fmt.Fprintln(w, "| variant | bytes/memory | overlap@k | τ-b | memory overlap | re-rank flips | Δ R@10 | Δ NDCG@3 | Δ memory_recall |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	delta := func(c *stats.Comparison) string {
		if c == nil {
			return "–"
		}
		return fmt.Sprintf("%+.4f [%+.4f, %+.4f]", c.Diff, c.Lo, c.Hi)
	}
	for _, r := range s.Rows {
		fmt.Fprintf(w, "| %s | %d | %.3f | %.3f | %.3f | %.3f | %s | %s | %s |\n", r.Variant, r.BytesPerMemory,
			r.OverlapK, r.TauB, r.MemOverlap, r.DecisionFlips, delta(r.DeltaR10), delta(r.DeltaNDCG3), delta(r.DeltaMemRec))
	}
	fmt.Fprintln(w)
}

// memQuantChart plots each quantized variant's agreement with float32.
func memQuantChart(s memQuantSet) ([]byte, error) {
	var groups []string
	series := []report.BarSeries{{Name: "overlap@k"}, {Name: "Kendall τ-b"}, {Name: "memory overlap"}}
	for _, r := range s.Rows {
		if r.Bits == 32 {
			continue
		}
		groups = append(groups, r.Variant)
		for i, v := range []float64{r.OverlapK, r.TauB, r.MemOverlap} {
			series[i].Mean = append(series[i].Mean, v)
			series[i].Lo = append(series[i].Lo, math.NaN())
			series[i].Hi = append(series[i].Hi, math.NaN())
		}
	}
	for i := range series {
		series[i].HideIntervals = true
	}
	return report.BarChart("Quantized memory embeddings vs float32: "+s.Name, "agreement", groups, series)
}
