package retrieval

import (
	"fmt"
	"math/rand/v2"
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

// A Parquet KB builds the same on-disk index as the in-memory one from the
// same file (ids, texts, rankings, the KB's fingerprint) although it is
// streamed: 9,000 rows in row groups of 1,024 and batches of 4,096, in
// shuffled id order, windowed; the spill file is gone afterwards, and bad
// rows are refused naming the row.
func TestDiskIndexFromParquetKB(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds on-disk and in-memory indexes of a 9,000-row Parquet KB")
	}
	_, texts := ZipfCorpus(21, 9000, 4000, 25, 1.1)
	r := rand.New(rand.NewPCG(5, 5))
	rows := make([][3]string, len(texts))
	for k, i := range r.Perm(len(texts)) {
		rows[k] = [3]string{fmt.Sprintf("d%05d", i), fmt.Sprintf("T <%d> & é", i%11), texts[i]}
	}
	kb := writeKBParquet(t, rows)
	cfg := DefaultConfig()
	cfg.ChunkWords, cfg.ChunkStride = 10, 6
	mem, chunks := memoryTwin(t, cfg, kb)
	disk, meta, dir := buildDisk(t, cfg, kb, DiskBuildOptions{BlockDocs: 1500, Workers: 2})
	loaded, err := LoadKB(t.Context(), kb)
	if err != nil {
		t.Fatal(err)
	}
	if meta.KBFingerprint != loaded.Fingerprint {
		t.Errorf("fingerprint %s, LoadKB's %s", meta.KBFingerprint, loaded.Fingerprint)
	}
	compareIndexes(t, disk, mem, chunks, queriesFrom(chunks, Analyzer{}, 100, 9))
	left, _ := filepath.Glob(filepath.Join(dir, ".kb-*"))
	if len(left) > 0 {
		t.Errorf("spill files left behind: %v", left)
	}

	for _, c := range []struct {
		rows [][3]string
		want string
	}{
		{[][3]string{{"a", "", "x"}, {"b", "", "y"}, {"a", "", "z"}}, `duplicate passage id "a"`},
		{[][3]string{{"a", "", "x"}, {"b", "", " "}}, `:row 2: field "text": empty text`},
		{[][3]string{{"a", "", "x"}, {"", "", "y"}}, `:row 2: field "id": missing`},
	} {
		bad := writeKBParquet(t, c.rows)
		out := t.TempDir()
		_, err := BuildDiskIndex(t.Context(), DefaultConfig(), bad, out, DiskBuildOptions{})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.rows, err, c.want)
		}
		if left, _ := filepath.Glob(filepath.Join(out, "*")); len(left) > 0 {
			t.Errorf("%v: left %v", c.rows, left)
		}
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
	a, err := LoadKB(t.Context(), jp)
	if err != nil {
		t.Fatal(err)
	}
	b, err := LoadKB(t.Context(), pp)
	if err != nil {
		t.Fatal(err)
	}
	if len(a.Passages) != 70000 || !slices.Equal(a.Passages, b.Passages) {
		t.Fatalf("%d JSONL passages, %d Parquet, equal %v", len(a.Passages), len(b.Passages), slices.Equal(a.Passages, b.Passages))
	}
	ids, texts := ZipfCorpus(3, 70000, 500, 12, 1.1)
	if a.Passages[0].ID != ids[0] || a.Passages[69999].Text != texts[69999] {
		t.Errorf("the KB's passages differ from ZipfCorpus's: %+v vs %s %q", a.Passages[0], ids[0], texts[0])
	}
}
