package corpus

import (
	"os"
	"path/filepath"
	"slices"
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

func TestLoadParquet(t *testing.T) {
	path := writeKBParquet(t, [][3]string{{"a", "Title A", "alpha text"}, {"b", "", "beta text"}})
	kb, err := Load(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if len(kb.Passages) != 2 || kb.Passages[0] != (Passage{ID: "a", Title: "Title A", Text: "alpha text"}) || kb.Passages[1].ID != "b" {
		t.Fatalf("got %+v", kb.Passages)
	}
	dup := writeKBParquet(t, [][3]string{{"a", "", "x"}, {"b", "", "y"}, {"a", "", "z"}})
	if _, err := Load(t.Context(), dup); err == nil || !strings.Contains(err.Error(), dup+`:row 3: field "id": duplicate`) {
		t.Fatalf("duplicate id: got %v", err)
	}
	empty := writeKBParquet(t, [][3]string{{"a", "", " "}})
	if _, err := Load(t.Context(), empty); err == nil || !strings.Contains(err.Error(), `:row 1: field "text": empty`) {
		t.Fatalf("empty text: got %v", err)
	}
}

// The Parquet Zipf KB holds exactly the passages of the JSONL one (row
// groups of 65,536: 70,000 passages span two).
func TestZipfKBParquetMatchesJSONL(t *testing.T) {
	dir := t.TempDir()
	var js strings.Builder
	if err := WriteZipfKB(&js, 3, 70000, 500, 12, 1.1); err != nil {
		t.Fatal(err)
	}
	jp, pp := filepath.Join(dir, "kb.jsonl"), filepath.Join(dir, "kb.parquet")
	if err := os.WriteFile(jp, []byte(js.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(pp)
	if err != nil {
		t.Fatal(err)
	}
	if err := WriteZipfKBParquet(f, 3, 70000, 500, 12, 1.1); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	a, err := Load(t.Context(), jp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(t.Context(), pp)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Passages) != 70000 || !slices.Equal(a.Passages, b.Passages) {
		t.Fatalf("%d JSONL passages, %d Parquet, equal %v", len(a.Passages), len(b.Passages), slices.Equal(a.Passages, b.Passages))
	}
	ids, texts := Zipf(3, 70000, 500, 12, 1.1)
	if a.Passages[0].ID != ids[0] || a.Passages[69999].Text != texts[69999] {
		t.Errorf("the KB's passages differ from Zipf's: %+v vs %s %q", a.Passages[0], ids[0], texts[0])
	}
}
