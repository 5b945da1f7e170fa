package datasets

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// writeTable writes one Parquet row group with arrow-go, as another tool
// (pandas, a Hugging Face dataset's to_parquet) would.
func writeTable(t *testing.T, name string, schema *arrow.Schema, fill func(b *array.RecordBuilder)) string {
	t.Helper()
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	fill(b)
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), name)
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	w, err := pqarrow.NewFileWriter(schema, f, nil, pqarrow.DefaultWriterProps())
	if err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return p
}

func messagesType(fields ...string) arrow.DataType {
	fs := make([]arrow.Field, len(fields))
	for i, f := range fields {
		fs[i] = arrow.Field{Name: f, Type: arrow.BinaryTypes.String}
	}
	return arrow.ListOf(arrow.StructOf(fs...))
}

// hfTable is a Hugging Face style export: {role, content} messages, several
// answers, and the column names given (conv_id, turn, question, history).
func hfTable(t *testing.T, names [4]string, msgFields ...string) string {
	schema := arrow.NewSchema([]arrow.Field{
		{Name: names[0], Type: arrow.BinaryTypes.String},
		{Name: names[1], Type: arrow.PrimitiveTypes.Int64},
		{Name: names[2], Type: arrow.BinaryTypes.String},
		{Name: names[3], Type: messagesType(msgFields...)},
		{Name: "answers", Type: arrow.ListOf(arrow.BinaryTypes.String)},
	}, nil)
	return writeTable(t, "hf.parquet", schema, func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).Append("c1")
		b.Field(1).(*array.Int64Builder).Append(2)
		b.Field(2).(*array.StringBuilder).Append("who wrote it?")
		lb := b.Field(3).(*array.ListBuilder)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		lb.Append(true)
		for _, m := range [][2]string{{"user", "tell me about hamlet"}, {"assistant", "a tragedy set in denmark"}} {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(m[0])
			for k := 1; k < len(msgFields); k++ {
				sb.FieldBuilder(k).(*array.StringBuilder).Append(m[1])
			}
		}
		ab := b.Field(4).(*array.ListBuilder)
		ab.Append(true)
		for _, a := range []string{"Shakespeare", "William Shakespeare"} {
			ab.ValueBuilder().(*array.StringBuilder).Append(a)
		}
	})
}

var wantHamlet = []Message{{Role: "user", Text: "tell me about hamlet"}, {Role: "assistant", Text: "a tragedy set in denmark"}}

// The bug: a {role, content} Parquet loaded with an empty history.
func TestParquetHistoryContent(t *testing.T) {
	p := hfTable(t, [4]string{"conv_id", "turn", "question", "history"}, "role", "content")
	turns, err := ReadParquet(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	if len(turns) != 1 || !reflect.DeepEqual(turns[0].History, wantHamlet) {
		t.Fatalf("history %+v, want %+v", turns[0].History, wantHamlet)
	}
	if turns[0].Answer != "Shakespeare" || !reflect.DeepEqual(turns[0].References(), []string{"Shakespeare", "William Shakespeare"}) {
		t.Fatalf("answer %q references %q", turns[0].Answer, turns[0].References())
	}
}

func TestParquetNestedFieldsAreStrict(t *testing.T) {
	for _, c := range []struct {
		fields []string
		want   string
	}{
		{[]string{"role", "text", "name"}, `column "history": unknown nested field "name" (known: role, text, content)`},
		{[]string{"role", "text", "content"}, "both text and content"},
		{[]string{"role"}, "neither a text nor a content field"},
		{[]string{"speaker", "text"}, `unknown nested field "speaker"`},
	} {
		p := hfTable(t, [4]string{"conv_id", "turn", "question", "history"}, c.fields...)
		_, err := ReadParquet(t.Context(), p)
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), p) {
			t.Errorf("history %v: got %v, want an error naming %s and %q", c.fields, err, p, c.want)
		}
	}
	// Passages: a score column the schema does not have is not dropped.
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "conv_id", Type: arrow.BinaryTypes.String},
		{Name: "turn", Type: arrow.PrimitiveTypes.Int64},
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "passages", Type: messagesType("id", "score")},
	}, nil)
	p := writeTable(t, "pass.parquet", schema, func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).Append("c")
		b.Field(1).(*array.Int64Builder).Append(1)
		b.Field(2).(*array.StringBuilder).Append("q")
		b.Field(3).(*array.ListBuilder).Append(true)
	})
	if _, err := ReadParquet(t.Context(), p); err == nil || !strings.Contains(err.Error(), `unknown nested field "score"`) {
		t.Errorf("passages with score: %v", err)
	}
}

func TestParquetColumnsMapping(t *testing.T) {
	p := hfTable(t, [4]string{"id", "turn", "query", "context"}, "role", "content")
	cols := map[string]string{"conv_id": "id", "question": "query", "history": "context"}
	turns, _, err := LoadContext(t.Context(), p, LoadOptions{Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	if turns[0].ConvID != "c1" || turns[0].Question != "who wrote it?" || !reflect.DeepEqual(turns[0].History, wantHamlet) {
		t.Fatalf("mapped turn %+v", turns[0])
	}
	// Without the mapping the foreign names are refused, with a hint.
	if _, _, err := LoadContext(t.Context(), p, LoadOptions{}); err == nil || !strings.Contains(err.Error(), `no column "conv_id"`) || !strings.Contains(err.Error(), "data.columns") {
		t.Errorf("unmapped: %v", err)
	}
	// A nested problem names the source column.
	p = hfTable(t, [4]string{"id", "turn", "query", "context"}, "role", "body")
	if _, _, err := LoadContext(t.Context(), p, LoadOptions{Columns: cols}); err == nil || !strings.Contains(err.Error(), `column "context" (data.columns history): unknown nested field "body"`) {
		t.Errorf("nested error: %v", err)
	}
}

func writeLines(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "in.jsonl")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestJSONLContentColumnsAndAnswers(t *testing.T) {
	good := `{"id": "c1", "turn": 2, "query": "who wrote it?", "context": [{"role": "user", "content": "tell me about hamlet"}, {"role": "assistant", "content": "a tragedy set in denmark"}], "answers": ["Shakespeare", "William Shakespeare"]}`
	cols := map[string]string{"conv_id": "id", "question": "query", "history": "context"}
	turns, _, err := LoadContext(t.Context(), writeLines(t, good), LoadOptions{Columns: cols})
	if err != nil {
		t.Fatal(err)
	}
	if got := turns[0]; got.ConvID != "c1" || got.Question != "who wrote it?" || !reflect.DeepEqual(got.History, wantHamlet) ||
		got.Answer != "Shakespeare" || len(got.References()) != 2 {
		t.Fatalf("turn %+v", got)
	}
	// The normalized names with content need no mapping.
	plain := `{"conv_id": "c", "turn": 1, "question": "q", "history": [{"role": "user", "content": "hi"}], "answer": "a", "answers": ["a", "b"]}`
	turns, _, err = LoadContext(t.Context(), writeLines(t, plain), LoadOptions{})
	if err != nil || turns[0].History[0].Text != "hi" || !reflect.DeepEqual(turns[0].References(), []string{"a", "b"}) {
		t.Fatalf("plain: %+v %v", turns, err)
	}
	for _, c := range []struct {
		line, want string
	}{
		{`{"id": "c1", "turn": 1, "query": 5}`, `:1: field "query": want a string, got a number 5`},
		{`{"id": "c1", "turn": 1, "query": "q", "context": [{"role": "user", "text": "a", "content": "b"}]}`, `:1: field "context[0].content": the message has text too`},
		{`{"id": "c1", "turn": 1, "query": "q", "question": "q2"}`, `:1: field "query": data.columns maps it to question, but the record also has a field question`},
		{`{"id": "c1", "turn": 1, "query": "q", "answers": ["a", 3]}`, `:1: field "answers[1]": want a string, got a number 3`},
		{`{"id": "c1", "turn": 1, "query": "q", "context": [{"role": "user", "contents": "b"}]}`, `:1: field "context[0].contents": unknown field`},
	} {
		p := writeLines(t, c.line)
		_, _, err := LoadContext(t.Context(), p, LoadOptions{Columns: cols})
		if err == nil || !strings.Contains(err.Error(), p+c.want) {
			t.Errorf("%s:\n got %v\nwant %s%s", c.line, err, p, c.want)
		}
	}
	for _, bad := range []map[string]string{{"questoin": "query"}, {"question": "q", "rewrite": "q"}, {"question": ""}} {
		if _, _, err := LoadContext(t.Context(), writeLines(t, plain), LoadOptions{Columns: bad}); err == nil || !strings.Contains(err.Error(), "data.columns") {
			t.Errorf("columns %v: %v", bad, err)
		}
		cfg := DefaultConfig()
		cfg.Train, cfg.Columns = "x.jsonl", bad
		if err := cfg.Validate(); err == nil || !strings.HasPrefix(err.Error(), "columns") {
			t.Errorf("config columns %v: %v", bad, err)
		}
	}
}

// Several answers survive both writers.
func TestAnswersRoundTrip(t *testing.T) {
	in := []Turn{{ConvID: "c", Turn: 1, Question: "q", Answer: "a", Answers: []string{"a", "b"}, User: "c"},
		{ConvID: "c", Turn: 2, Question: "q2", Answer: "x", User: "c"}}
	dir := t.TempDir()
	for _, p := range []string{filepath.Join(dir, "t.parquet"), filepath.Join(dir, "t.jsonl")} {
		var err error
		if strings.HasSuffix(p, ".parquet") {
			err = WriteParquetContext(t.Context(), p, in)
		} else {
			err = WriteJSONLContext(t.Context(), p, in)
		}
		if err != nil {
			t.Fatal(err)
		}
		out, _, err := LoadContext(context.Background(), p, LoadOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range in {
			if fmt.Sprint(out[i].References()) != fmt.Sprint(in[i].References()) || out[i].Answer != in[i].Answer {
				t.Errorf("%s turn %d: %q %q, want %q %q", p, i, out[i].Answer, out[i].References(), in[i].Answer, in[i].References())
			}
		}
	}
}

// answer_snippets as a list of lists (one list of spans per annotator) loads
// from Parquet as it does from JSONL; DuckDB writes a JSONL file's
// answer_snippets as list<list<string>>, which was refused. The JSONL loader
// is the reference.
func TestParquetAnswerSnippetGroupsLikeJSONL(t *testing.T) {
	groups := [][]string{{"in 1603", "1603"}, {}, {"1603", "the first folio"}}
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "conv_id", Type: arrow.BinaryTypes.String},
		{Name: "turn", Type: arrow.PrimitiveTypes.Int64},
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "passages", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "id", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "relevance", Type: arrow.PrimitiveTypes.Int32, Nullable: true},
			arrow.Field{Name: "answer_snippets", Type: arrow.ListOf(arrow.ListOf(arrow.BinaryTypes.String)), Nullable: true},
		))},
	}, nil)
	p := writeTable(t, "duck.parquet", schema, func(b *array.RecordBuilder) {
		b.Field(0).(*array.StringBuilder).Append("c1")
		b.Field(1).(*array.Int64Builder).Append(1)
		b.Field(2).(*array.StringBuilder).Append("when was hamlet printed?")
		pl := b.Field(3).(*array.ListBuilder)
		ps := pl.ValueBuilder().(*array.StructBuilder)
		pl.Append(true)
		// passage a: three annotators' groups; b: null; c: an empty list
		ps.Append(true)
		ps.FieldBuilder(0).(*array.StringBuilder).Append("a")
		ps.FieldBuilder(1).(*array.Int32Builder).Append(2)
		outer := ps.FieldBuilder(2).(*array.ListBuilder)
		inner := outer.ValueBuilder().(*array.ListBuilder)
		outer.Append(true)
		for _, g := range groups {
			inner.Append(true)
			for _, s := range g {
				inner.ValueBuilder().(*array.StringBuilder).Append(s)
			}
		}
		ps.Append(true)
		ps.FieldBuilder(0).(*array.StringBuilder).Append("b")
		ps.FieldBuilder(1).(*array.Int32Builder).AppendNull()
		outer.AppendNull()
		ps.Append(true)
		ps.FieldBuilder(0).(*array.StringBuilder).Append("c")
		ps.FieldBuilder(1).(*array.Int32Builder).Append(0)
		outer.Append(true)
	})
	fromParquet, err := ReadParquet(t.Context(), p)
	if err != nil {
		t.Fatalf("list<list<string>> answer_snippets refused: %v", err)
	}
	fromJSONL, _, err := LoadContext(t.Context(), writeLines(t, `{"conv_id": "c1", "turn": 1, "question": "when was hamlet printed?", "passages": [{"id": "a", "relevance": 2, "answer_snippets": [["in 1603", "1603"], [], ["1603", "the first folio"]]}, {"id": "b"}, {"id": "c", "relevance": 0, "answer_snippets": []}]}`), LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(fromParquet[0].Passages, fromJSONL[0].Passages) {
		t.Fatalf("parquet %#v\njsonl   %#v", fromParquet[0].Passages, fromJSONL[0].Passages)
	}
	// Independently of the JSONL reader: the spans flattened in order
	// without repeats, the groups kept as given.
	a := fromParquet[0].Passages[0]
	if want := []string{"in 1603", "1603", "the first folio"}; !reflect.DeepEqual(a.AnswerSnippets, want) {
		t.Errorf("flattened %q, want %q", a.AnswerSnippets, want)
	}
	if !reflect.DeepEqual(a.AnswerSnippetSets, groups) {
		t.Errorf("groups %q, want %q", a.AnswerSnippetSets, groups)
	}
	for _, q := range fromParquet[0].Passages[1:] {
		if q.AnswerSnippets != nil || q.AnswerSnippetSets != nil {
			t.Errorf("passage %s: %#v, want no snippets", q.ID, q)
		}
	}
}
