package evaluate

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/himes-rl/himes/evaluate/ir"
	"github.com/himes-rl/himes/internal/parquetfile"

	"github.com/himes-rl/himes/internal/stats"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
)

var metricLabels = map[string]string{
	MReward: "HSER", MRougeF1: "Rouge-L F1", MEM: "EM (reward)", MHit: "Hit", MSquadEM: "SQuAD EM", MSquadF1: "SQuAD F1",
	MMRR: "MRR", MNDCG3: "NDCG@3", MRecall10: "R@10", MRecall100: "R@100",
	MMemPrecision: "mem P", MMemRecall: "mem R", MMemMRR: "mem MRR",
}

// metricLabel is a metric's column label; the reward's EM names its
// normalization, so that it is never read as SQuAD EM.
func metricLabel(m string, rep Report) string {
	if m == MEM {
		switch rep.EMNormalization {
		case hser.NormUnicode:
			return "EM (reward, unicode norm.)"
		case hser.NormSQuAD:
			return "EM (reward, SQuAD norm.)"
		}
	}
	return metricLabels[m]
}

// WriteMarkdown writes two tables: every system's means with 95% intervals,
// and each system's difference from its baseline with the p-value.
func WriteMarkdown(w io.Writer, rep Report) error {
	var b strings.Builder
	metrics := presentMetrics(rep)
	fmt.Fprintf(&b, "%d %s in %d %s (%d with a reference answer, %d with judged passages); responder %s.\n",
		rep.Turns, plural(rep.Turns, "turn"), rep.Conversations, plural(rep.Conversations, "conversation"), rep.WithAnswer, rep.WithGold, rep.Responder)
	if r := rep.Retrieval; r.Method != "" {
		fmt.Fprintf(&b, "Retrieval: %s, top %d of %d candidates", r.Method, r.TopK, r.Candidates)
		if r.Embedder != "" {
			fmt.Fprintf(&b, ", embedded by %s", r.Embedder)
		}
		if r.MemoryEmbedder != "" {
			fmt.Fprintf(&b, "; long-term memory embedded by %s", r.MemoryEmbedder)
		}
		b.WriteString(".\n")
	}
	fmt.Fprintf(&b, "Means over turns with %.0f%% bootstrap intervals resampling conversations (%d resamples).\n",
		rep.Stats.Level*100, rep.Stats.Resamples)
	if n := rep.TrainingConversations; n > 0 {
		// Measured on what the policy trained on, a policy row is not a
		// held-out result, however it is reported later.
		fmt.Fprintf(&b, "Not held out: %d of the %d %s are in the run's training data (data.train's training and dev splits, data.sft); a trained policy's rows measure turns it was trained or selected on.\n",
			n, rep.Conversations, plural(rep.Conversations, "conversation"))
	}
	if rep.Conversations == 1 {
		// Every resample is the one conversation: the interval collapses
		// to the mean and would read as certainty.
		b.WriteString("One conversation: the bootstrap has nothing to resample, so each interval is the mean itself, not a measure of its uncertainty (and every p is 1).\n")
	}
	if slices.Contains(metrics, MEM) {
		b.WriteString("EM (reward) is the reward's exact match, normalized as reward.tokenizer says; SQuAD EM and F1 are the official SQuAD v1.1 script's.\n")
	}
	b.WriteString("\n")
	b.WriteString("| system | failed |")
	for _, m := range metrics {
		b.WriteString(" " + metricLabel(m, rep) + " |")
	}
	b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(metrics)) + "\n")
	for _, s := range rep.Systems {
		fmt.Fprintf(&b, "| %s | %d/%d |", MarkdownEscape(s.displayName()), s.Failed, s.Turns)
		for _, m := range metrics {
			if e, ok := s.Metrics[m]; ok {
				fmt.Fprintf(&b, " %.3f [%.3f, %.3f] |", e.Mean, e.Lo, e.Hi)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	var cmpRows []string
	for _, s := range rep.Systems {
		for _, c := range []struct {
			label string
			m     map[string]stats.Comparison
		}{{"vs " + s.Baseline, s.VsBaseline}, {"vs memory off", s.VsMemoryOff}} {
			if len(c.m) == 0 {
				continue
			}
			row := fmt.Sprintf("| %s | %s |", MarkdownEscape(s.displayName()), MarkdownEscape(c.label))
			for _, m := range metrics {
				if d, ok := c.m[m]; ok {
					row += fmt.Sprintf(" %+.3f [%+.3f, %+.3f] %s |", d.Diff, d.Lo, d.Hi, pString(d.P, rep.Stats.Resamples))
				} else {
					row += " – |"
				}
			}
			cmpRows = append(cmpRows, row)
		}
	}
	if len(cmpRows) > 0 {
		b.WriteString("\nPaired differences (system − baseline) over turns both completed; p from a sign-flip randomization test over conversations.\n\n| system | against |")
		for _, m := range metrics {
			b.WriteString(" Δ " + metricLabel(m, rep) + " |")
		}
		b.WriteString("\n|---|---|" + strings.Repeat("---:|", len(metrics)) + "\n")
		b.WriteString(strings.Join(cmpRows, "\n") + "\n")
	}
	var notes []string
	shallow := map[int][]string{}
	for _, s := range rep.Systems {
		if s.Failed > 0 {
			var parts []string
			for _, st := range sortedKeys(s.Failures) {
				parts = append(parts, fmt.Sprintf("%s %d", st, s.Failures[st]))
			}
			note := fmt.Sprintf("%s: %d of %d turns failed (%s); they are left out of its means and of its pairs.", s.Name, s.Failed, s.Turns, strings.Join(parts, ", "))
			if c, ok := s.VsBaseline[MReward]; ok {
				note += fmt.Sprintf(" Its HSER comparison with %s is over the %d turns both completed.", s.Baseline, c.Turns)
			}
			notes = append(notes, note)
		}
		if s.Memory {
			note := fmt.Sprintf("%s: long-term memory activated on %d of %d turns and re-ranked the candidates on %d.", s.Name, s.MemoryTurns, s.Turns, s.RerankedTurns)
			if s.RerankedTurns == 0 && s.Turns > s.Failed {
				// Activation alone changes no ranking: without this a
				// memory row equal to its memory-off row reads as "memory
				// does not help" when the memory never took part.
				note += " It never re-ranked (no activated memory reached retrieval.memory.rerank_floor): its rankings are those without memory."
			}
			notes = append(notes, note)
		}
		if _, ok := s.Metrics[MRecall100]; ok && s.RunDepth < 100 {
			shallow[s.RunDepth] = append(shallow[s.RunDepth], s.Name)
		}
	}
	for _, depth := range sortedIntKeys(shallow) {
		notes = append(notes, fmt.Sprintf("%s: the pipeline ranks at most %d passages, so R@100 is recall at that depth (raise retrieval.candidates).",
			strings.Join(shallow[depth], ", "), depth))
	}
	if len(notes) > 0 {
		b.WriteString("\n" + strings.Join(notes, "\n") + "\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// pString prints a p-value no finer than the resampling can resolve: at
// the floor 1/(resamples+1) no sign flip reached the observed difference.
func pString(p float64, resamples int) string {
	if floor := 1 / float64(resamples+1); p <= floor {
		return fmt.Sprintf("p<%.2g", 2*floor)
	}
	if p < 0.001 {
		return fmt.Sprintf("p=%.1e", p)
	}
	return fmt.Sprintf("p=%.3f", p)
}

func presentMetrics(rep Report) []string {
	var out []string
	for _, m := range allMetrics() {
		for _, s := range rep.Systems {
			if _, ok := s.Metrics[m]; ok {
				out = append(out, m)
				break
			}
		}
	}
	return out
}

func sortedKeys(m map[string]int) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

func sortedIntKeys[V any](m map[int]V) []int {
	ks := make([]int, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Ints(ks)
	return ks
}

// displayName is the system's name with the checkpoint it is, if any.
func (s SystemReport) displayName() string {
	if s.Checkpoint == "" {
		return s.Name
	}
	return s.Name + " (" + s.Checkpoint + ")"
}

// MarkdownEscape makes s safe inside a Markdown table cell.
func MarkdownEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// WriteJSON writes the report with every number, indented.
func WriteJSON(w io.Writer, rep Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(rep)
}

var unsafeName = regexp.MustCompile(`[^A-Za-z0-9._+-]+`)

// FileSafe turns a system name into a file name and TREC run tag.
func FileSafe(name string) string { return strings.Trim(unsafeName.ReplaceAllString(name, "_"), "_") }

// QueryID is the TREC query id of a turn ("<conv_id>_<turn>", whitespace-free).
func QueryID(convID string, turn int) string { return FileSafe(convID) + "_" + fmt.Sprint(turn) }

// WriteTRECRun writes one system's per-turn rankings as a TREC run file.
// Failed turns have no ranking and are absent, as trec_eval expects.
func WriteTRECRun(w io.Writer, res []TurnResult, tag string) error {
	bw := bufio.NewWriter(w)
	for _, r := range res {
		if len(r.Run) == 0 {
			continue
		}
		if err := ir.WriteTRECRun(bw, QueryID(r.ConvID, r.Turn), r.Run, tag); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// WriteQrels writes the turns' judgments in trec_eval's qrels format, so the
// run files can be checked with `trec_eval -m recip_rank qrels run`.
func WriteQrels(w io.Writer, turns []datasets.Turn) error {
	bw := bufio.NewWriter(w)
	for _, t := range turns {
		q := t.Qrels()
		ids := make([]string, 0, len(q))
		for id := range q {
			ids = append(ids, id)
		}
		sort.Strings(ids)
		for _, id := range ids {
			if _, err := fmt.Fprintf(bw, "%s 0 %s %d\n", QueryID(t.ConvID, t.Turn), id, q[id]); err != nil {
				return err
			}
		}
	}
	return bw.Flush()
}

// turnsSchema is the per-turn Parquet layout. Metrics that do not apply
// (no gold passages, failed turn) are null.
var turnsSchema = arrow.NewSchema([]arrow.Field{
	{Name: "system", Type: arrow.BinaryTypes.String},
	{Name: "rewriter", Type: arrow.BinaryTypes.String},
	{Name: "memory", Type: arrow.FixedWidthTypes.Boolean},
	{Name: "conv_id", Type: arrow.BinaryTypes.String},
	{Name: "turn", Type: arrow.PrimitiveTypes.Int64},
	{Name: "question", Type: arrow.BinaryTypes.String},
	{Name: "rewrite", Type: arrow.BinaryTypes.String},
	{Name: "answer", Type: arrow.BinaryTypes.String},
	{Name: "reference", Type: arrow.BinaryTypes.String},
	{Name: "error", Type: arrow.BinaryTypes.String},
	{Name: "error_stage", Type: arrow.BinaryTypes.String},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "rougeL_p", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "rougeL_r", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "rougeL_f1", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "em", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "hit", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "squad_em", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "squad_f1", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "recip_rank", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "ndcg_cut_3", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "recall_10", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "recall_100", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "top_passages", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "memories", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "memory_ids", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "memory_precision", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "memory_recall", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "memory_mrr", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "seconds", Type: arrow.PrimitiveTypes.Float64},
}, nil)

// topPassages is how much of each ranking the Parquet keeps (the TREC run
// files have all of it).
const topPassages = 10

// WriteTurnsParquet writes every system's per-turn results to path,
// atomically (temporary file, then rename).
func WriteTurnsParquet(path string, results [][]TurnResult) (err error) {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), turnsSchema)
	defer b.Release()
	// Builders by column name, so the code below does not depend on positions.
	field := func(name string) array.Builder {
		idx := turnsSchema.FieldIndices(name)
		if len(idx) != 1 {
			panic("turns schema has no column " + name) // a programming error, caught by the tests
		}
		return b.Field(idx[0])
	}
	str := func(name, v string) { field(name).(*array.StringBuilder).Append(v) }
	num := func(name string, v float64, ok bool) {
		fb := field(name).(*array.Float64Builder)
		if ok && !math.IsNaN(v) {
			fb.Append(v)
		} else {
			fb.AppendNull()
		}
	}
	list := func(name string, vs []string) {
		lb := field(name).(*array.ListBuilder)
		lb.Append(true)
		vb := lb.ValueBuilder().(*array.StringBuilder)
		for _, v := range vs {
			vb.Append(v)
		}
	}
	for _, sys := range results {
		for _, r := range sys {
			str("system", r.System)
			str("rewriter", r.Rewriter)
			field("memory").(*array.BooleanBuilder).Append(r.Memory)
			str("conv_id", r.ConvID)
			field("turn").(*array.Int64Builder).Append(int64(r.Turn))
			str("question", r.Question)
			str("rewrite", r.Rewrite)
			str("answer", r.Answer)
			str("reference", r.Reference)
			str("error", r.Error)
			str("error_stage", r.ErrorStage)
			sc := r.Score
			num("reward", sc.Reward, r.HasAnswer)
			num("rougeL_p", sc.RougeP, r.HasAnswer)
			num("rougeL_r", sc.RougeR, r.HasAnswer)
			num("rougeL_f1", sc.RougeF1, r.HasAnswer)
			num("em", sc.EM, r.HasAnswer)
			num("hit", sc.Hit, r.HasAnswer)
			num("squad_em", sc.SquadEM, r.HasAnswer)
			num("squad_f1", sc.SquadF1, r.HasAnswer)
			num("recip_rank", r.RecipRank, r.HasGold)
			num("ndcg_cut_3", r.NDCG3, r.HasGold)
			num("recall_10", r.Recall10, r.HasGold)
			num("recall_100", r.Recall100, r.HasGold)
			var top []string
			for i, s := range r.Run {
				if i == topPassages {
					break
				}
				top = append(top, s.ID)
			}
			list("top_passages", top)
			list("memories", r.Memories)
			list("memory_ids", r.MemoryIDs)
			num("memory_precision", r.MemPrecision, r.HasMemoryLabels)
			num("memory_recall", r.MemRecall, r.HasMemoryLabels)
			num("memory_mrr", r.MemMRR, r.HasMemoryLabels)
			field("seconds").(*array.Float64Builder).Append(r.Seconds)
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()

	err = parquetfile.Write(path, turnsSchema, rec)
	if err != nil {
		return fmt.Errorf("write per-turn results: %w", err)
	}
	return nil
}

// plural is word, with an s unless n is 1.
func plural(n int, word string) string {
	if n == 1 {
		return word
	}
	return word + "s"
}
