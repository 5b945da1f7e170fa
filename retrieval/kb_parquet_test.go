package retrieval

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

func writeKBParquet(t *testing.T, rows [][3]string) string {
	t.Helper()
	schema := arrow.NewSchema([]arrow.Field{
		{Name: "id", Type: arrow.BinaryTypes.String},
		{Name: "title", Type: arrow.BinaryTypes.String},
		{Name: "text", Type: arrow.BinaryTypes.String},
	}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	for _, r := range rows {
		for i := range 3 {
			b.Field(i).(*array.StringBuilder).Append(r[i])
		}
	}
	rec := b.NewRecordBatch()
	defer rec.Release()
	tbl := array.NewTableFromRecords(schema, []arrow.RecordBatch{rec})
	defer tbl.Release()
	path := filepath.Join(t.TempDir(), "kb.parquet")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := pqarrow.WriteTable(tbl, f, 1024, nil, pqarrow.DefaultWriterProps()); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestLoadKBParquet(t *testing.T) {
	path := writeKBParquet(t, [][3]string{{"a", "Title A", "alpha text"}, {"b", "", "beta text"}})
	kb, err := LoadKB(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(kb.Passages) != 2 || kb.Passages[0] != (Passage{ID: "a", Title: "Title A", Text: "alpha text"}) || kb.Passages[1].ID != "b" {
		t.Fatalf("got %+v", kb.Passages)
	}
	dup := writeKBParquet(t, [][3]string{{"a", "", "x"}, {"b", "", "y"}, {"a", "", "z"}})
	if _, err := LoadKB(t.Context(), dup); err == nil || !strings.Contains(err.Error(), dup+`:row 3: field "id": duplicate`) {
		t.Fatalf("duplicate id: got %v", err)
	}
	empty := writeKBParquet(t, [][3]string{{"a", "", " "}})
	if _, err := LoadKB(t.Context(), empty); err == nil || !strings.Contains(err.Error(), `:row 1: field "text": empty`) {
		t.Fatalf("empty text: got %v", err)
	}
}
