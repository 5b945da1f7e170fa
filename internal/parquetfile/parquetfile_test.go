package parquetfile

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

func TestWriteRoundTripsAndLeavesNoTemporaryFile(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "id", Type: arrow.BinaryTypes.String}, {Name: "x", Type: arrow.PrimitiveTypes.Float64}}, nil)
	b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
	defer b.Release()
	b.Field(0).(*array.StringBuilder).AppendValues([]string{"a", "b", "c"}, nil)
	b.Field(1).(*array.Float64Builder).AppendValues([]float64{0.5, -1, 3}, nil)
	rec := b.NewRecordBatch()
	defer rec.Release()
	dir := t.TempDir()
	path := filepath.Join(dir, "t.parquet")
	if err := Write(path, schema, rec); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the file", len(entries))
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{}, memory.DefaultAllocator)
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := fr.ReadTable(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	if tbl.NumRows() != 3 || tbl.NumCols() != 2 {
		t.Fatalf("read %d rows × %d columns, want 3 × 2", tbl.NumRows(), tbl.NumCols())
	}
	xs := tbl.Column(1).Data().Chunk(0).(*array.Float64)
	if xs.Value(0) != 0.5 || xs.Value(1) != -1 || xs.Value(2) != 3 {
		t.Errorf("x column %v", xs)
	}
	c, err := pf.MetaData().RowGroup(0).ColumnChunk(0)
	if err != nil || c.Compression().String() != "ZSTD" {
		t.Errorf("compression %v (%v), want ZSTD", c.Compression(), err)
	}
}
