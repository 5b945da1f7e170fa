package datasets

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"

	"github.com/himes-rl/himes/internal/parquetfile"
)

// parquetRowGroup bounds the rows per record batch and row group.
const parquetRowGroup = 4096

var (
	historyType = arrow.ListOf(arrow.StructOf(
		arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "text", Type: arrow.BinaryTypes.String},
	))
	passageStruct = arrow.StructOf(
		arrow.Field{Name: "id", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "title", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "text", Type: arrow.BinaryTypes.String},
		arrow.Field{Name: "relevance", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
		arrow.Field{Name: "answer_snippets", Type: arrow.ListOf(arrow.BinaryTypes.String)},
		arrow.Field{Name: "answer_snippet_sets", Type: arrow.ListOf(arrow.ListOf(arrow.BinaryTypes.String)), Nullable: true},
		arrow.Field{Name: "source", Type: arrow.BinaryTypes.String},
	)
	// turnSchema is the Parquet layout of the normalized schema (see doc.go).
	turnSchema = arrow.NewSchema([]arrow.Field{
		{Name: "conv_id", Type: arrow.BinaryTypes.String},
		{Name: "turn", Type: arrow.PrimitiveTypes.Int64},
		{Name: "turn_label", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "history", Type: historyType},
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "rewrite", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "answer", Type: arrow.BinaryTypes.String},
		{Name: "passages", Type: arrow.ListOf(passageStruct)},
		{Name: "meta", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "user", Type: arrow.BinaryTypes.String, Nullable: true},
		{Name: "answers", Type: arrow.ListOf(arrow.BinaryTypes.String), Nullable: true},
	}, nil)
)

// WriteParquetContext writes turns as Parquet (zstd, row groups of 4096)
// atomically (internal/parquetfile). Nested history and passages are
// list<struct>; meta is the JSON text of the object.
func WriteParquetContext(ctx context.Context, path string, turns []Turn) error {
	return parquetfile.WriteFile(path, turnSchema, parquetfile.Options{RowGroupRows: parquetRowGroup}, func(w *parquetfile.Writer) error {
		for start := 0; start < len(turns); start += parquetRowGroup {
			if err := ctx.Err(); err != nil {
				return fmt.Errorf("write %s: %w", path, err)
			}
			rec, err := buildTurnRecord(turns[start:min(start+parquetRowGroup, len(turns))])
			if err != nil {
				return err
			}
			err = w.Write(rec)
			rec.Release()
			if err != nil {
				return fmt.Errorf("write rows %d..: %w", start, err)
			}
		}
		return nil
	})
}

func buildTurnRecord(turns []Turn) (arrow.RecordBatch, error) {
	b := array.NewRecordBuilder(memory.DefaultAllocator, turnSchema)
	defer b.Release()
	convID := b.Field(0).(*array.StringBuilder)
	turnNo := b.Field(1).(*array.Int64Builder)
	label := b.Field(2).(*array.StringBuilder)
	hist := b.Field(3).(*array.ListBuilder)
	histS := hist.ValueBuilder().(*array.StructBuilder)
	question := b.Field(4).(*array.StringBuilder)
	rewrite := b.Field(5).(*array.StringBuilder)
	answer := b.Field(6).(*array.StringBuilder)
	pass := b.Field(7).(*array.ListBuilder)
	passS := pass.ValueBuilder().(*array.StructBuilder)
	meta := b.Field(8).(*array.StringBuilder)
	user := b.Field(9).(*array.StringBuilder)
	answers := b.Field(10).(*array.ListBuilder)
	for _, t := range turns {
		convID.Append(t.ConvID)
		turnNo.Append(int64(t.Turn))
		appendOptional(label, t.TurnLabel, t.TurnLabel != "")
		hist.Append(true)
		for _, m := range t.History {
			histS.Append(true)
			histS.FieldBuilder(0).(*array.StringBuilder).Append(m.Role)
			histS.FieldBuilder(1).(*array.StringBuilder).Append(m.Text)
		}
		question.Append(t.Question)
		if t.Rewrite != nil {
			rewrite.Append(*t.Rewrite)
		} else {
			rewrite.AppendNull()
		}
		answer.Append(t.Answer)
		pass.Append(true)
		for _, p := range t.Passages {
			appendPassage(passS, p)
		}
		if t.Meta != nil {
			mb, err := marshalNoEscape(t.Meta)
			if err != nil {
				return nil, fmt.Errorf("turn %s: meta: %w", t.ID(), err)
			}
			meta.Append(string(mb))
		} else {
			meta.AppendNull()
		}
		appendOptional(user, t.User, t.User != "")
		if t.Answers == nil {
			answers.AppendNull()
		} else {
			answers.Append(true)
			for _, a := range t.Answers {
				answers.ValueBuilder().(*array.StringBuilder).Append(a)
			}
		}
	}
	return b.NewRecordBatch(), nil
}

func appendPassage(s *array.StructBuilder, p PassageRef) {
	s.Append(true)
	s.FieldBuilder(0).(*array.StringBuilder).Append(p.ID)
	s.FieldBuilder(1).(*array.StringBuilder).Append(p.Title)
	s.FieldBuilder(2).(*array.StringBuilder).Append(p.Text)
	rel := s.FieldBuilder(3).(*array.Int32Builder)
	if p.Relevance != nil {
		rel.Append(int32(*p.Relevance))
	} else {
		rel.AppendNull()
	}
	snip := s.FieldBuilder(4).(*array.ListBuilder)
	snip.Append(true)
	for _, x := range p.AnswerSnippets {
		snip.ValueBuilder().(*array.StringBuilder).Append(x)
	}
	sets := s.FieldBuilder(5).(*array.ListBuilder)
	if p.AnswerSnippetSets == nil {
		sets.AppendNull()
	} else {
		sets.Append(true)
		inner := sets.ValueBuilder().(*array.ListBuilder)
		for _, set := range p.AnswerSnippetSets {
			inner.Append(true)
			for _, x := range set {
				inner.ValueBuilder().(*array.StringBuilder).Append(x)
			}
		}
	}
	s.FieldBuilder(6).(*array.StringBuilder).Append(p.Source)
}

func appendOptional(b *array.StringBuilder, v string, ok bool) {
	if ok {
		b.Append(v)
	} else {
		b.AppendNull()
	}
}

// ReadParquet reads a Parquet file of the normalized columns; any invalid row
// is an error. Use LoadContext with SkipBad to skip invalid rows instead.
func ReadParquet(ctx context.Context, path string) ([]Turn, error) {
	turns, _, err := LoadContext(ctx, path, LoadOptions{Format: FormatParquet})
	return turns, err
}

// nestedFields are the struct fields a list<struct> column may have.
var nestedFields = map[string][]string{
	"history":  {"role", "text", "content"},
	"passages": {"id", "title", "text", "relevance", "answer_snippets", "answer_snippet_sets", "source"},
}

// checkNested holds a Parquet file's nested columns to the rules JSONL
// follows: an unknown struct field is an error naming it (never silently
// dropped), and the fields a record needs exist. name gives the source's
// column name for messages.
func checkNested(cols map[string]arrow.Array, name func(string) string) error {
	for col, known := range nestedFields {
		a := cols[col]
		if a == nil {
			continue
		}
		l, ok := a.DataType().(*arrow.ListType)
		var st *arrow.StructType
		if ok {
			st, ok = l.Elem().(*arrow.StructType)
		}
		if !ok {
			return fmt.Errorf("column %s: want list<struct<%s>>, got %s", name(col), strings.Join(known, ", "), a.DataType())
		}
		has := map[string]bool{}
		for _, f := range st.Fields() {
			if !slices.Contains(known, f.Name) {
				return fmt.Errorf("column %s: unknown nested field %q (known: %s)", name(col), f.Name, strings.Join(known, ", "))
			}
			has[f.Name] = true
		}
		switch {
		case col == "history" && !has["role"]:
			return fmt.Errorf("column %s: the messages have no role field", name(col))
		case col == "history" && !has["text"] && !has["content"]:
			return fmt.Errorf("column %s: the messages have neither a text nor a content field", name(col))
		case col == "history" && has["text"] && has["content"]:
			return fmt.Errorf("column %s: the messages have both text and content fields: give one", name(col))
		case col == "passages" && !has["id"]:
			return fmt.Errorf("column %s: the passages have no id field", name(col))
		}
	}
	if a := cols["answers"]; a != nil {
		if l, ok := a.DataType().(*arrow.ListType); !ok || !arrow.TypeEqual(l.Elem(), arrow.BinaryTypes.String) && !arrow.TypeEqual(l.Elem(), arrow.BinaryTypes.LargeString) {
			return fmt.Errorf("column %s: want list<string>, got %s", name("answers"), a.DataType())
		}
	}
	return nil
}

// readParquetRecords decodes every row; a row that does not fit the schema is
// a record with an error naming the row (0-based) and the column.
func readParquetRecords(ctx context.Context, path string, rename map[string]string) ([]record, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	tbl, err := parquetfile.ReadTable(ctx, path, raw, parquetRowGroup)
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	cols := map[string]arrow.Array{}
	for i, f := range tbl.Schema().Fields() {
		chunks := tbl.Column(i).Data().Chunks()
		var arr arrow.Array
		if len(chunks) == 1 {
			arr = chunks[0]
			arr.Retain()
		} else if arr, err = array.Concatenate(chunks, memory.DefaultAllocator); err != nil {
			return nil, fmt.Errorf("%s: column %q: %w", path, f.Name, err)
		}
		defer arr.Release()
		cols[f.Name] = arr
	}
	for norm, src := range rename {
		a, ok := cols[src]
		if !ok || src == norm {
			continue
		}
		if cols[norm] != nil {
			return nil, fmt.Errorf("%s: parquet has both column %q and %q, and data.columns maps %s to %s", path, src, norm, src, norm)
		}
		cols[norm] = a
		delete(cols, src)
	}
	name := func(col string) string {
		if src, ok := rename[col]; ok && src != col {
			return fmt.Sprintf("%q (data.columns %s)", src, col)
		}
		return fmt.Sprintf("%q", col)
	}
	for _, req := range []string{"conv_id", "turn", "question"} {
		if cols[req] == nil {
			return nil, fmt.Errorf("%s: parquet has no column %s (want the normalized columns, see datasets/doc.go, or map yours with data.columns)", path, name(req))
		}
	}
	if err := checkNested(cols, name); err != nil {
		return nil, fmt.Errorf("%s: parquet %w", path, err)
	}
	for name := range cols {
		if turnSchema.FieldIndices(name) == nil {
			return nil, fmt.Errorf("%s: parquet column %q is not a normalized column (put extra fields under meta)", path, name)
		}
	}
	n := int(tbl.NumRows())
	recs := make([]record, 0, n)
	for i := 0; i < n; i++ {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
		}
		t, err := parquetRow(cols, i)
		if err == nil {
			err = validateTurn(t)
		}
		recs = append(recs, record{turn: t, err: err, index: i, pos: len(recs)})
	}
	return recs, nil
}

func parquetRow(cols map[string]arrow.Array, i int) (Turn, error) {
	var t Turn
	var err error
	if t.ConvID, _, err = stringAt(cols["conv_id"], i); err != nil {
		return t, nestField("conv_id", err)
	}
	if label, ok, err := stringAt(cols["turn_label"], i); err != nil {
		return t, nestField("turn_label", err)
	} else if ok {
		t.TurnLabel = label
	}
	if t.History, err = historyAt(cols["history"], i); err != nil {
		return t, nestField("history", err)
	}
	if s, isStr, _ := stringAt(cols["turn"], i); isStr {
		// Tools that write the JSONL through a data frame turn a column of
		// mixed integers and labels into strings.
		n, label, err := parseTurnNumber(json.RawMessage(strconv.Quote(s)))
		if err != nil {
			return t, nestField("turn", err)
		}
		t.Turn = n
		if label != "" {
			t.TurnLabel, t.Turn = label, countUser(t.History)+1
		}
	} else {
		n, ok, err := intAt(cols["turn"], i)
		if err != nil {
			return t, nestField("turn", err)
		}
		if !ok {
			return t, fieldErrf("turn", "is null")
		}
		t.Turn = int(n)
	}
	if t.Question, _, err = stringAt(cols["question"], i); err != nil {
		return t, nestField("question", err)
	}
	if rw, ok, err := stringAt(cols["rewrite"], i); err != nil {
		return t, nestField("rewrite", err)
	} else if ok {
		t.Rewrite = &rw
	}
	if t.Answer, _, err = stringAt(cols["answer"], i); err != nil {
		return t, nestField("answer", err)
	}
	if t.Answers, err = stringListAt(cols["answers"], i); err != nil {
		return t, nestField("answers", err)
	}
	if t.Answer == "" && len(t.Answers) > 0 {
		t.Answer = t.Answers[0]
	}
	if t.Passages, err = passagesAt(cols["passages"], i); err != nil {
		return t, nestField("passages", err)
	}
	if m, ok, err := stringAt(cols["meta"], i); err != nil {
		return t, nestField("meta", err)
	} else if ok {
		if t.Meta, err = decodeMeta([]byte(m)); err != nil {
			return t, nestField("meta", err)
		}
	}
	if t.User, _, err = stringAt(cols["user"], i); err != nil {
		return t, nestField("user", err)
	}
	return t, nil
}

// stringAt reads a string cell; a missing column or null gives ("", false).
func stringAt(a arrow.Array, i int) (string, bool, error) {
	if a == nil || a.IsNull(i) {
		return "", false, nil
	}
	switch x := a.(type) {
	// Clone: arrow's Value aliases the column buffer, which is released.
	case *array.String:
		return strings.Clone(x.Value(i)), true, nil
	case *array.LargeString:
		return strings.Clone(x.Value(i)), true, nil
	case *array.Binary:
		return string(x.Value(i)), true, nil
	}
	return "", false, fmt.Errorf("want a string column, got %s", a.DataType())
}

// intAt reads an integer cell of any integer width.
func intAt(a arrow.Array, i int) (int64, bool, error) {
	if a == nil || a.IsNull(i) {
		return 0, false, nil
	}
	switch x := a.(type) {
	case *array.Int64:
		return x.Value(i), true, nil
	case *array.Int32:
		return int64(x.Value(i)), true, nil
	case *array.Int16:
		return int64(x.Value(i)), true, nil
	case *array.Int8:
		return int64(x.Value(i)), true, nil
	case *array.Uint32:
		return int64(x.Value(i)), true, nil
	case *array.Uint16:
		return int64(x.Value(i)), true, nil
	case *array.Uint8:
		return int64(x.Value(i)), true, nil
	}
	return 0, false, fmt.Errorf("want an integer column, got %s", a.DataType())
}

// listAt returns the struct values of a list<struct> cell and its range.
func listAt(a arrow.Array, i int) (*array.Struct, int, int, error) {
	if a == nil || a.IsNull(i) {
		return nil, 0, 0, nil
	}
	l, ok := a.(*array.List)
	if !ok {
		return nil, 0, 0, fmt.Errorf("want a list<struct> column, got %s", a.DataType())
	}
	s, ok := l.ListValues().(*array.Struct)
	if !ok {
		return nil, 0, 0, fmt.Errorf("want a list<struct> column, got %s", a.DataType())
	}
	start, end := l.ValueOffsets(i)
	return s, int(start), int(end), nil
}

func structField(s *array.Struct, name string) arrow.Array {
	idx, ok := s.DataType().(*arrow.StructType).FieldIdx(name)
	if !ok {
		return nil
	}
	return s.Field(idx)
}

func historyAt(a arrow.Array, i int) ([]Message, error) {
	s, start, end, err := listAt(a, i)
	if err != nil || s == nil || start == end {
		return nil, err
	}
	role, text := structField(s, "role"), structField(s, "text")
	key := "text"
	if text == nil { // checkNested: then the messages carry content
		text, key = structField(s, "content"), "content"
	}
	out := make([]Message, 0, end-start)
	for j := start; j < end; j++ {
		idx := "[" + strconv.Itoa(j-start) + "]"
		r, _, err := stringAt(role, j)
		if err != nil {
			return nil, nestField(idx+".role", err)
		}
		x, _, err := stringAt(text, j)
		if err != nil {
			return nil, nestField(idx+"."+key, err)
		}
		out = append(out, Message{Role: r, Text: x})
	}
	return out, nil
}

func passagesAt(a arrow.Array, i int) ([]PassageRef, error) {
	s, start, end, err := listAt(a, i)
	if err != nil || s == nil || start == end {
		return nil, err
	}
	id, title, text := structField(s, "id"), structField(s, "title"), structField(s, "text")
	rel, snip, sets, src := structField(s, "relevance"), structField(s, "answer_snippets"), structField(s, "answer_snippet_sets"), structField(s, "source")
	out := make([]PassageRef, 0, end-start)
	for j := start; j < end; j++ {
		idx := "[" + strconv.Itoa(j-start) + "]"
		var p PassageRef
		if p.ID, _, err = stringAt(id, j); err != nil {
			return nil, nestField(idx+".id", err)
		}
		if p.Title, _, err = stringAt(title, j); err != nil {
			return nil, nestField(idx+".title", err)
		}
		if p.Text, _, err = stringAt(text, j); err != nil {
			return nil, nestField(idx+".text", err)
		}
		if p.Source, _, err = stringAt(src, j); err != nil {
			return nil, nestField(idx+".source", err)
		}
		if r, ok, err := intAt(rel, j); err != nil {
			return nil, nestField(idx+".relevance", err)
		} else if ok {
			v := int(r)
			p.Relevance = &v
		}
		if isListOfLists(snip) {
			// One list of spans per annotator, as JSONL allows (and as
			// DuckDB writes a JSONL file's answer_snippets): flattened like
			// JSONL's, the groups kept.
			if p.AnswerSnippetSets, err = snippetSetsAt(snip, j); err != nil {
				return nil, nestField(idx+".answer_snippets", err)
			}
			if len(p.AnswerSnippetSets) == 0 {
				p.AnswerSnippetSets = nil // [] and null mean no spans, as in JSONL
			}
			p.AnswerSnippets = flattenUnique(p.AnswerSnippetSets)
			if p.AnswerSnippetSets != nil && sets != nil && !sets.IsNull(j) {
				return nil, fieldErrf(idx+".answer_snippet_sets", "given as well as answer_snippets as a list of lists: give the groups once")
			}
		} else if p.AnswerSnippets, err = stringListAt(snip, j); err != nil {
			return nil, nestField(idx+".answer_snippets", err)
		}
		if sets != nil && !sets.IsNull(j) {
			if p.AnswerSnippetSets, err = snippetSetsAt(sets, j); err != nil {
				return nil, nestField(idx+".answer_snippet_sets", err)
			}
		}
		out = append(out, p)
	}
	return out, nil
}

// isListOfLists reports a list<list<...>> column.
func isListOfLists(a arrow.Array) bool {
	if a == nil {
		return false
	}
	l, ok := a.DataType().(*arrow.ListType)
	if !ok {
		return false
	}
	_, ok = l.Elem().(*arrow.ListType)
	return ok
}

// snippetSetsAt reads a list<list<string>> cell: nil for null, an empty
// group as an empty (non-nil) list.
func snippetSetsAt(a arrow.Array, i int) ([][]string, error) {
	if a == nil || a.IsNull(i) {
		return nil, nil
	}
	l, ok := a.(*array.List)
	if !ok || !isListOfLists(a) {
		return nil, fmt.Errorf("want list<list<string>>, got %s", a.DataType())
	}
	st, en := l.ValueOffsets(i)
	sets := make([][]string, 0, en-st)
	for k := int(st); k < int(en); k++ {
		set, err := stringListAt(l.ListValues(), k)
		if err != nil {
			return nil, fmt.Errorf("group %d: %w", k-int(st)+1, err)
		}
		if set == nil {
			set = []string{}
		}
		sets = append(sets, set)
	}
	return sets, nil
}

func stringListAt(a arrow.Array, i int) ([]string, error) {
	if a == nil || a.IsNull(i) {
		return nil, nil
	}
	l, ok := a.(*array.List)
	if !ok {
		return nil, fmt.Errorf("want list<string>, got %s", a.DataType())
	}
	st, en := l.ValueOffsets(i)
	if st == en {
		return nil, nil
	}
	out := make([]string, 0, en-st)
	for k := int(st); k < int(en); k++ {
		s, _, err := stringAt(l.ListValues(), k)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
