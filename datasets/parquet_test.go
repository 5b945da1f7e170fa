package datasets

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// writeForeignParquet writes a table the way another tool might: turn as a
// string column, int32 relevance, no optional columns.
func writeForeignParquet(t *testing.T, turns []string, roles []string) string {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "conv_id", Type: arrow.BinaryTypes.String},
		{Name: "turn", Type: arrow.BinaryTypes.String},
		{Name: "question", Type: arrow.BinaryTypes.String},
		{Name: "history", Type: arrow.ListOf(arrow.StructOf(
			arrow.Field{Name: "role", Type: arrow.BinaryTypes.String},
			arrow.Field{Name: "text", Type: arrow.BinaryTypes.String}))},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for i, tn := range turns {
		b.Field(0).(*array.StringBuilder).Append("c")
		b.Field(1).(*array.StringBuilder).Append(tn)
		b.Field(2).(*array.StringBuilder).Append("q")
		lb := b.Field(3).(*array.ListBuilder)
		sb := lb.ValueBuilder().(*array.StructBuilder)
		lb.Append(true)
		for j := 0; j < i; j++ {
			sb.Append(true)
			sb.FieldBuilder(0).(*array.StringBuilder).Append(roles[j%len(roles)])
			sb.FieldBuilder(1).(*array.StringBuilder).Append("earlier")
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	p := filepath.Join(t.TempDir(), "foreign.parquet")
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

func TestParquetForeignShapes(t *testing.T) {
	p := writeForeignParquet(t, []string{"1", "1-3", "7"}, []string{"user"})
	turns, err := ReadParquet(t.Context(), p)
	if err != nil {
		t.Fatal(err)
	}
	// "1-3" is a label; its ordinal is the user messages before it + 1 = 2.
	if turns[0].Turn != 1 || turns[1].TurnLabel != "1-3" || turns[1].Turn != 2 || turns[2].Turn != 7 || turns[2].TurnLabel != "" {
		t.Errorf("turns %v %v %v", turns[0].ID(), turns[1].ID(), turns[2].ID())
	}

	// A bad role in row 2 is reported with the row and the nested field.
	p = writeForeignParquet(t, []string{"1", "2", "3"}, []string{"user", "bot"})
	_, err = ReadParquet(t.Context(), p)
	var re *RecordError
	if !errors.As(err, &re) || re.Record != 2 || re.Field != "history[1].role" || !strings.Contains(err.Error(), `got "bot"`) {
		t.Fatalf("got %v", err)
	}
	// The message counts rows from 1, as JSONL counts lines: the third row.
	if want := p + `: record 3: field "history[1].role": `; !strings.HasPrefix(err.Error(), want) {
		t.Fatalf("got %v, want it to start with %s", err, want)
	}
	turns, st, err := LoadContext(t.Context(), p, LoadOptions{SkipBad: true})
	if err != nil || len(turns) != 2 || st.Skipped != 1 {
		t.Errorf("SkipBad: %d turns, %+v, %v", len(turns), st, err)
	}
}

func TestParquetRejectsUnknownColumns(t *testing.T) {
	p := filepath.Join(t.TempDir(), "x.parquet")
	schema := arrow.NewSchema([]arrow.Field{{Name: "conv_id", Type: arrow.BinaryTypes.String}, {Name: "turn", Type: arrow.PrimitiveTypes.Int64}, {Name: "question", Type: arrow.BinaryTypes.String}, {Name: "score", Type: arrow.PrimitiveTypes.Float64}}, nil)
	err := writeParquetRows(p, schema, 1, func(b *array.RecordBuilder, i int) {
		b.Field(0).(*array.StringBuilder).Append("c")
		b.Field(1).(*array.Int64Builder).Append(1)
		b.Field(2).(*array.StringBuilder).Append("q")
		b.Field(3).(*array.Float64Builder).Append(0.5)
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ReadParquet(t.Context(), p); err == nil || !strings.Contains(err.Error(), `column "score"`) {
		t.Errorf("got %v", err)
	}
}
