package grpo

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/himes-rl/himes/internal/parquetfile"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/rollout"
)

// SampleRow is one held-out turn of an evaluation's samples table: what the
// policy made of it, next to the human rewrite and the raw question. The
// table holds the first grpo.eval_samples evaluation turns, the same turns at
// every evaluation, so a reader follows each one as training goes.
type SampleRow struct {
	Step          int    `json:"step"`
	Phase         string `json:"phase"`
	ConvID        string `json:"conv_id"`
	Turn          int    `json:"turn"`
	Question      string `json:"question"`
	PolicyRewrite string `json:"policy_rewrite"`
	// GoldRewrite is the human rewrite; nil where the data has none.
	GoldRewrite *string `json:"gold_rewrite"`
	// RetrievedIDs are the chunks handed to the responder, best first.
	RetrievedIDs []string `json:"retrieved_ids"`
	// GoldPassages are the turn's relevant passages (its qrels).
	GoldPassages []string `json:"gold_passages"`
	Answer       string   `json:"answer"`
	Reference    string   `json:"reference"`
	// Reward and its terms; nil when the rollout failed (Error says why).
	Reward   *float64 `json:"reward"`
	RougeLF1 *float64 `json:"rougeL_f1"`
	EM       *float64 `json:"em"`
	Hit      *float64 `json:"hit"`
	// RawReward is the raw question's reward on the same turn.
	RawReward *float64 `json:"raw_reward"`
	Error     string   `json:"error"`
}

// samplesSchema is the Parquet layout of a samples table, columns named as
// SampleRow's json tags.
var samplesSchema = arrow.NewSchema([]arrow.Field{
	{Name: "step", Type: arrow.PrimitiveTypes.Int64},
	{Name: "phase", Type: arrow.BinaryTypes.String},
	{Name: "conv_id", Type: arrow.BinaryTypes.String},
	{Name: "turn", Type: arrow.PrimitiveTypes.Int64},
	{Name: "question", Type: arrow.BinaryTypes.String},
	{Name: "policy_rewrite", Type: arrow.BinaryTypes.String},
	{Name: "gold_rewrite", Type: arrow.BinaryTypes.String, Nullable: true},
	{Name: "retrieved_ids", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "gold_passages", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	{Name: "answer", Type: arrow.BinaryTypes.String},
	{Name: "reference", Type: arrow.BinaryTypes.String},
	{Name: "reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "rougeL_f1", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "em", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "hit", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "raw_reward", Type: arrow.PrimitiveTypes.Float64, Nullable: true},
	{Name: "error", Type: arrow.BinaryTypes.String},
}, nil)

// sampleRows builds the table from the first n turns' policy and raw rollouts.
func sampleRows(step int, phase string, turns []datasets.Turn, pol, raw []rollout.Record, n int) []SampleRow {
	n = min(n, len(turns), len(pol), len(raw))
	rows := make([]SampleRow, n)
	for i := range rows {
		t, p := turns[i], pol[i]
		r := SampleRow{Step: step, Phase: phase, ConvID: t.ConvID, Turn: t.Turn, Question: t.Question,
			PolicyRewrite: p.Rewrite, GoldRewrite: t.Rewrite, RetrievedIDs: p.ChunkIDs, GoldPassages: t.GoldPassageIDs(),
			Answer: p.Answer, Reference: t.Answer, Error: p.Error}
		if !p.Failed() {
			r.Reward, r.RougeLF1, r.EM, r.Hit = ptr(p.Reward), ptr(p.RougeF1), ptr(p.EM), ptr(p.Hit)
		}
		if !raw[i].Failed() {
			r.RawReward = ptr(raw[i].Reward)
		}
		rows[i] = r
	}
	return rows
}

// writeSamples writes the evaluation's samples table and mirrors it to the
// tracker as a Markdown table.
func (l *Loop) writeSamples(step int, phase string, turns []datasets.Turn, pol, raw []rollout.Record) error {
	if l.cfg.EvalSamples == 0 {
		return nil
	}
	rows := sampleRows(step, phase, turns, pol, raw, l.cfg.EvalSamples)
	if err := WriteSamples(l.deps.Run.SamplesPath(step, phase), rows); err != nil {
		return err
	}
	if t := l.deps.Tracker; t != nil {
		if err := t.Text(step, l.deps.Now(), "eval/samples", SamplesMarkdown(rows)); err != nil {
			return fmt.Errorf("tracker: %w", err)
		}
	}
	return nil
}

// WriteSamples writes rows as a Parquet file at path, atomically.
func WriteSamples(path string, rows []SampleRow) error {
	b := array.NewRecordBuilder(memory.NewGoAllocator(), samplesSchema)
	defer b.Release()
	str := func(i int) *array.StringBuilder { return b.Field(i).(*array.StringBuilder) }
	i64 := func(i int) *array.Int64Builder { return b.Field(i).(*array.Int64Builder) }
	list := func(i int, vs []string) {
		lb := b.Field(i).(*array.ListBuilder)
		lb.Append(true)
		for _, v := range vs {
			lb.ValueBuilder().(*array.StringBuilder).Append(v)
		}
	}
	opt := func(i int, v *float64) {
		fb := b.Field(i).(*array.Float64Builder)
		if v == nil {
			fb.AppendNull()
		} else {
			fb.Append(*v)
		}
	}
	for _, r := range rows {
		i64(0).Append(int64(r.Step))
		str(1).Append(r.Phase)
		str(2).Append(r.ConvID)
		i64(3).Append(int64(r.Turn))
		str(4).Append(r.Question)
		str(5).Append(r.PolicyRewrite)
		if r.GoldRewrite == nil {
			str(6).AppendNull()
		} else {
			str(6).Append(*r.GoldRewrite)
		}
		list(7, r.RetrievedIDs)
		list(8, r.GoldPassages)
		str(9).Append(r.Answer)
		str(10).Append(r.Reference)
		opt(11, r.Reward)
		opt(12, r.RougeLF1)
		opt(13, r.EM)
		opt(14, r.Hit)
		opt(15, r.RawReward)
		str(16).Append(r.Error)
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	err := parquetfile.Write(path, samplesSchema, rec)
	if err != nil {
		return fmt.Errorf("write samples: %w", err)
	}
	return nil
}

// ReadSamples reads a samples table written by WriteSamples.
func ReadSamples(path string) ([]SampleRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read samples: %w", err)
	}
	defer f.Close()
	mem := memory.NewGoAllocator()
	tbl, err := pqarrow.ReadTable(context.Background(), f, parquet.NewReaderProperties(mem), pqarrow.ArrowReadProperties{}, mem)
	if err != nil {
		return nil, fmt.Errorf("read samples %s: %w", path, err)
	}
	defer tbl.Release()
	// Names and kinds must match column by column (Parquet adds field ids
	// and renames list elements, so the schemas are not Equal).
	if got, want := tbl.Schema().NumFields(), samplesSchema.NumFields(); got != want {
		return nil, fmt.Errorf("read samples %s: %d columns, want %d", path, got, want)
	}
	for i, want := range samplesSchema.Fields() {
		if got := tbl.Schema().Field(i); got.Name != want.Name || got.Type.ID() != want.Type.ID() {
			return nil, fmt.Errorf("read samples %s: column %d is %s %s, want %s %s", path, i, got.Name, got.Type, want.Name, want.Type)
		}
	}
	rows := make([]SampleRow, tbl.NumRows())
	for ci := range int(tbl.NumCols()) {
		row := 0
		for _, chunk := range tbl.Column(ci).Data().Chunks() {
			for i := range chunk.Len() {
				setSampleField(&rows[row], ci, chunk, i)
				row++
			}
		}
	}
	return rows, nil
}

func setSampleField(r *SampleRow, col int, a arrow.Array, i int) {
	if a.IsNull(i) {
		return
	}
	s := func() string { return a.(*array.String).Value(i) }
	n := func() int { return int(a.(*array.Int64).Value(i)) }
	f := func() *float64 { return ptr(a.(*array.Float64).Value(i)) }
	l := func() []string {
		la := a.(*array.List)
		lo, hi := la.ValueOffsets(i)
		var out []string
		for k := lo; k < hi; k++ {
			out = append(out, la.ListValues().(*array.String).Value(int(k)))
		}
		return out
	}
	switch col {
	case 0:
		r.Step = n()
	case 1:
		r.Phase = s()
	case 2:
		r.ConvID = s()
	case 3:
		r.Turn = n()
	case 4:
		r.Question = s()
	case 5:
		r.PolicyRewrite = s()
	case 6:
		g := s()
		r.GoldRewrite = &g
	case 7:
		r.RetrievedIDs = l()
	case 8:
		r.GoldPassages = l()
	case 9:
		r.Answer = s()
	case 10:
		r.Reference = s()
	case 11:
		r.Reward = f()
	case 12:
		r.RougeLF1 = f()
	case 13:
		r.EM = f()
	case 14:
		r.Hit = f()
	case 15:
		r.RawReward = f()
	case 16:
		r.Error = s()
	}
}

// SamplesMarkdown renders rows as a Markdown table (TensorBoard's text
// plugin renders it): question, policy and gold rewrites, retrieved ids,
// answer and reward.
func SamplesMarkdown(rows []SampleRow) string {
	var b strings.Builder
	b.WriteString("| turn | question | policy rewrite | gold rewrite | retrieved | answer | reference | reward | raw reward |\n")
	b.WriteString("|---|---|---|---|---|---|---|---:|---:|\n")
	for _, r := range rows {
		gold := "–"
		if r.GoldRewrite != nil {
			gold = *r.GoldRewrite
		}
		answer := r.Answer
		if r.Error != "" {
			answer = "failed: " + r.Error
		}
		fmt.Fprintf(&b, "| %s#%d | %s | %s | %s | %s | %s | %s | %s | %s |\n", mdCell(r.ConvID), r.Turn, mdCell(r.Question),
			mdCell(r.PolicyRewrite), mdCell(gold), mdCell(strings.Join(r.RetrievedIDs, ", ")), mdCell(answer),
			mdCell(r.Reference), fmtOpt(r.Reward), fmtOpt(r.RawReward))
	}
	return b.String()
}

func fmtOpt(v *float64) string {
	if v == nil {
		return "–"
	}
	return fmt.Sprintf("%.3f", *v)
}

// mdCell keeps a value inside one Markdown table cell.
func mdCell(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	return strings.ReplaceAll(s, "|", `\|`)
}
