package ablate

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

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/report"
	"github.com/himes-rl/himes/retrieval"
)

// MemQuantSet is one data set's rows, float32 first (memquant.json).
type MemQuantSet struct {
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
	Rows        []MemQuantRow   `json:"rows"`
	FloatR10    *stats.Estimate `json:"float32_recall_10,omitempty"`
	FloatNDCG3  *stats.Estimate `json:"float32_ndcg_3,omitempty"`
	FloatMemRec *stats.Estimate `json:"float32_memory_recall,omitempty"`
}

// MemQuantRow is one variant measured against float32 (whose own row has
// agreement 1 and differences 0).
type MemQuantRow struct {
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

// MemQuantInput is one data set of the memory-quantization ablation and
// the pipeline it runs through.
type MemQuantInput struct {
	// Data is the file the turns came from; its base name without the
	// extension names the set.
	Data  string
	Turns []datasets.Turn
	// Pipeline holds the long-term memory of the turns' users, attached
	// through Retrieve, its causal view (retrieval.AttachMemory).
	Pipeline *retrieval.Pipeline
	Retrieve retrieval.Retriever
	// Rewriter gives the rewrite retrieval runs on (raw or gold).
	Rewriter evaluate.Rewriter
	// Seed seeds the random rotations (run.seed); Stats the intervals.
	Seed  uint64
	Stats stats.Config
}

// MemQuant runs the turns' second stage under float32 and every quantized
// variant of the attached memory (the first stage is shared: it does not
// depend on memory), measures each against float32, and restores the
// float32 memory after.
func MemQuant(ctx context.Context, in MemQuantInput) (MemQuantSet, error) {
	set, err := memQuant(ctx, in.Pipeline, in.Retrieve, in.Turns, in.Rewriter, in.Seed, in.Stats)
	if err != nil {
		return MemQuantSet{}, err
	}
	set.Data = in.Data
	set.Name = strings.TrimSuffix(filepath.Base(in.Data), filepath.Ext(in.Data))
	return set, nil
}

func memQuant(ctx context.Context, p *retrieval.Pipeline, retrieve retrieval.Retriever, turns []datasets.Turn, rw evaluate.Rewriter, seed uint64, st stats.Config) (MemQuantSet, error) {
	causal, ok := retrieve.(*retrieval.CausalRetriever)
	base := p.Memory()
	if !ok || base == nil {
		return MemQuantSet{}, errors.New("memory-quant: long-term memory is not attached")
	}
	defer func() { _ = p.SetMemory(base) }()
	dim := 0
	for _, e := range base.Entries() {
		dim = len(e.Embedding)
		break
	}
	if dim == 0 {
		return MemQuantSet{}, errors.New("memory-quant: the data give no memories")
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
		return MemQuantSet{}, fmt.Errorf("memory-quant: rewriter %s failed on every turn", rw.Name())
	}
	turns = kept
	cands, errs := p.SearchBatch(ctx, texts, p.Config().Candidates)
	for i, err := range errs {
		if err != nil {
			return MemQuantSet{}, fmt.Errorf("turn %s: first-stage search: %w", turns[i].ID(), err)
		}
	}
	variants := []*memory.Quantizer{nil}
	for _, bits := range memory.QuantBits {
		for _, rot := range []bool{false, true} {
			q, err := memory.NewQuantizer(bits, dim, rot, seed)
			if err != nil {
				return MemQuantSet{}, err
			}
			variants = append(variants, q)
		}
	}
	set := MemQuantSet{Turns: len(turns), Skipped: skipped, Rewriter: rw.Name(), TopK: p.Config().TopK, Dim: dim, Memories: base.Len()}
	per := make([][]memQuantTurn, len(variants))
	for v, q := range variants {
		store := base
		if q != nil {
			var err error
			if store, err = base.Quantized(q); err != nil {
				return MemQuantSet{}, err
			}
		}
		if err := p.SetMemory(store); err != nil {
			return MemQuantSet{}, err
		}
		per[v] = make([]memQuantTurn, len(turns))
		for i, t := range turns {
			res, ranked, err := p.RerankCandidates(ctx, reqs[i], cands[i])
			if err != nil {
				return MemQuantSet{}, fmt.Errorf("turn %s: %w", t.ID(), err)
			}
			per[v][i] = measureTurn(t, res, ranked)
		}
		name := "float32"
		if q != nil {
			name = q.Name()
		}
		slog.Info("memory-quant variant done", "variant", name, "turns", len(turns))
	}
	convs := evaluate.Conversations(turns)
	metric := func(v int, f func(memQuantTurn) float64) []float64 {
		out := make([]float64, len(turns))
		for i := range turns {
			out[i] = f(per[v][i])
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
		e, err := evaluate.Estimate(convs, metric(0, f), st)
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
		row := MemQuantRow{Variant: "float32", Bits: 32, BytesPerMemory: 4 * dim}
		if q != nil {
			row = MemQuantRow{Variant: q.Name(), Bits: q.Bits, Rotate: q.Rotate, BytesPerMemory: q.BytesPerVector()}
		}
		agreement(&row, per[0], per[v])
		paired := func(f func(memQuantTurn) float64) (*stats.Comparison, error) {
			c, err := evaluate.Compare(convs, metric(v, f), metric(0, f), st)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", row.Variant, err)
			}
			return &c, nil
		}
		var err error
		if set.Judged > 0 {
			if row.DeltaR10, err = paired(r10); err != nil {
				return MemQuantSet{}, err
			}
			if row.DeltaNDCG3, err = paired(n3); err != nil {
				return MemQuantSet{}, err
			}
		}
		if set.Labelled > 0 {
			if row.DeltaMemRec, err = paired(memRec); err != nil {
				return MemQuantSet{}, err
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
		sc := evaluate.ScoreRanking(evaluate.PipelineRun(res), q)
		m.r10, m.n3 = sc.Recall10, sc.NDCG3
	}
	if len(t.MemoryLabels) > 0 {
		_, m.memRec, _ = evaluate.MemoryActivation(m.memories, t.MemoryLabels)
	}
	return m
}

// agreement fills row's agreement of variant turns vs float32 turns.
func agreement(row *MemQuantRow, base, v []memQuantTurn) {
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

// WriteMemQuant writes memquant.json, memquant.md and one PNG per set into
// out, and the Markdown to stdout too.
func WriteMemQuant(stdout io.Writer, out string, sets []MemQuantSet) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return fmt.Errorf("memory-quant: %w", err)
	}
	if err := atomicfile.WriteJSON(filepath.Join(out, "memquant.json"), sets); err != nil {
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

func writeMemQuantTable(w io.Writer, s MemQuantSet) {
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
func memQuantChart(s MemQuantSet) ([]byte, error) {
	var rows []report.QuantAgreement
	for _, r := range s.Rows {
		if r.Bits != 32 {
			rows = append(rows, report.QuantAgreement{Variant: r.Variant, OverlapK: r.OverlapK, TauB: r.TauB, MemOverlap: r.MemOverlap})
		}
	}
	return report.QuantAgreementChart(s.Name, rows)
}
