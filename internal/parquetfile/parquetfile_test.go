package parquetfile

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
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

func TestWriteFileAppliesOptionsAndStreamsRowGroups(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "step", Type: arrow.PrimitiveTypes.Int64}, {Name: "reward", Type: arrow.PrimitiveTypes.Float64}}, nil)
	path := filepath.Join(t.TempDir(), "t.parquet")
	o := Options{Snappy: true, RowGroupRows: 4, NoDictionary: true, StatsFor: []string{"step"},
		MetaKeys: []string{"himes.a", "himes.b"}, MetaValues: []string{"1", "two"}}
	// Two batches of 6 and 3 rows, at most 4 rows a group: 4+2, then 3.
	err := WriteFile(path, schema, o, func(w *Writer) error {
		for _, n := range []int{6, 3} {
			b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
			for i := range n {
				b.Field(0).(*array.Int64Builder).Append(int64(i))
				b.Field(1).(*array.Float64Builder).Append(float64(i) / 2)
			}
			rec := b.NewRecordBatch()
			b.Release()
			err := w.Write(rec)
			rec.Release()
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	pf, err := file.OpenParquetFile(path, false)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	md := pf.MetaData()
	var rows []int64
	for g := range md.NumRowGroups() {
		rows = append(rows, md.RowGroup(g).NumRows())
	}
	if !slices.Equal(rows, []int64{4, 2, 3}) {
		t.Errorf("row groups of %v rows, want [4 2 3]", rows)
	}
	for c, wantStats := range []bool{true, false} {
		cc, err := md.RowGroup(0).ColumnChunk(c)
		if err != nil {
			t.Fatal(err)
		}
		if cc.Compression().String() != "SNAPPY" {
			t.Errorf("column %d: compression %v, want SNAPPY", c, cc.Compression())
		}
		if cc.HasDictionaryPage() {
			t.Errorf("column %d has a dictionary page", c)
		}
		if set, _ := cc.StatsSet(); set != wantStats {
			t.Errorf("column %d: statistics %v, want %v", c, set, wantStats)
		}
	}
	kv := md.KeyValueMetadata()
	for i, k := range o.MetaKeys {
		if v := kv.FindValue(k); v == nil || *v != o.MetaValues[i] {
			t.Errorf("metadata %s = %v, want %q", k, v, o.MetaValues[i])
		}
	}
}

func TestWriteFileFailedFillKeepsTheOldFile(t *testing.T) {
	schema := arrow.NewSchema([]arrow.Field{{Name: "x", Type: arrow.PrimitiveTypes.Int64}}, nil)
	dir := t.TempDir()
	path := filepath.Join(dir, "t.parquet")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	boom := errors.New("boom")
	err := WriteFile(path, schema, Options{}, func(w *Writer) error {
		b := array.NewRecordBuilder(memory.DefaultAllocator, schema)
		defer b.Release()
		b.Field(0).(*array.Int64Builder).Append(1)
		rec := b.NewRecordBatch()
		defer rec.Release()
		if err := w.Write(rec); err != nil {
			return err
		}
		return boom // interrupted after a row group reached the file
	})
	if !errors.Is(err, boom) {
		t.Fatalf("err = %v, want the fill's", err)
	}
	if b, _ := os.ReadFile(path); string(b) != "old" {
		t.Errorf("the old file became %q", b)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the old file", len(entries))
	}
}
