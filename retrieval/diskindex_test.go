package retrieval

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval/corpus"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// memoryTwin builds the in-memory index over the same chunks the disk build
// sees, the reference the on-disk index must equal.
func memoryTwin(t *testing.T, cfg Config, kbPath string) (*Index, []Chunk) {
	t.Helper()
	kb, err := corpus.Load(t.Context(), kbPath)
	if err != nil {
		t.Fatal(err)
	}
	chunks, err := sortedChunks(kb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	an, err := analysis.New(cfg.Analyzer)
	if err != nil {
		t.Fatal(err)
	}
	ids, texts := chunkTexts(chunks)
	ix, err := BuildIndexWith(ids, texts, BM25Params{K1: cfg.K1, B: cfg.B, Scoring: cfg.Scoring}, an)
	if err != nil {
		t.Fatal(err)
	}
	return ix, chunks
}

func buildDisk(t *testing.T, cfg Config, kbPath string, opt DiskBuildOptions) (*Index, IndexMeta, string) {
	t.Helper()
	dir := t.TempDir()
	if _, err := BuildDiskIndex(t.Context(), cfg, kbPath, dir, opt); err != nil {
		t.Fatal(err)
	}
	ix, meta, err := OpenDiskIndex(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ix.Close() })
	if err := VerifyDiskIndex(t.Context(), ix); err != nil {
		t.Fatalf("fresh index fails verification: %v", err)
	}
	return ix, meta, dir
}

// maxScoreSearch forces document-at-a-time MaxScore whatever the size.
func maxScoreSearch(ix *Index, tokens []string, k int) []Hit {
	sc := &searchScratch{}
	sc.qs = ix.prepare(tokens, nil, &sc.pos)
	return ix.searchWith(sc, k, false)
}

// compareIndexes checks that disk and mem hold the same documents, terms
// and statistics and rank every query identically (ids, order and
// bit-identical scores) under every search strategy.
func compareIndexes(t *testing.T, disk, mem *Index, chunks []Chunk, queries [][]string) {
	t.Helper()
	if disk.Len() != mem.Len() || disk.NumTerms() != mem.NumTerms() || disk.NumPostings() != mem.NumPostings() {
		t.Fatalf("disk: %d docs %d terms %d postings; memory: %d %d %d", disk.Len(), disk.NumTerms(), disk.NumPostings(),
			mem.Len(), mem.NumTerms(), mem.NumPostings())
	}
	if disk.AvgDocLen() != mem.AvgDocLen() {
		t.Fatalf("avgdl %v vs %v", disk.AvgDocLen(), mem.AvgDocLen())
	}
	for d, c := range chunks {
		if disk.ID(d) != c.ID {
			t.Fatalf("document %d: id %q, want %q", d, disk.ID(d), c.ID)
		}
		title, text, err := disk.Doc(d)
		if err != nil || title != c.Title || text != c.Text {
			t.Fatalf("document %d (%s): stored %q/%q (%v), want %q/%q", d, c.ID, title, text, err, c.Title, c.Text)
		}
		if n, ok := disk.DocNum(c.ID); !ok || n != d {
			t.Fatalf("DocNum(%q) = %d, %v; want %d", c.ID, n, ok, d)
		}
	}
	if _, ok := disk.DocNum(chunks[0].ID + "x"); ok {
		t.Fatal("DocNum found an id that is not there")
	}
	for tn := range uint32(mem.dict.len()) {
		term := mem.dict.term(tn)
		if disk.DF(term) != mem.DF(term) || disk.IDF(term) != mem.IDF(term) {
			t.Fatalf("term %q: df %d idf %v on disk, %d %v in memory", term, disk.DF(term), disk.IDF(term), mem.DF(term), mem.IDF(term))
		}
	}
	if disk.DF("no-such-term") != 0 {
		t.Fatal("unknown term has a df")
	}
	for qi, q := range queries {
		for _, k := range []int{1, 10, 100} {
			want := mem.SearchExhaustive(q, k)
			strategies := map[string][]Hit{
				"Search": disk.Search(q, k), "Exhaustive": disk.SearchExhaustive(q, k),
				"memory Search": mem.Search(q, k),
			}
			if disk.luc == nil {
				strategies["MaxScore"] = maxScoreSearch(disk, q, k)
			} else {
				strategies["dense"], strategies["document at a time"] = disk.searchLucene(q, k, true), disk.searchLucene(q, k, false)
			}
			for name, got := range strategies {
				if !reflect.DeepEqual(got, want) && !(len(got) == 0 && len(want) == 0) {
					t.Fatalf("query %d %q k=%d: %s on disk\n%v\nin memory (exhaustive)\n%v", qi, q, k, name, got, want)
				}
			}
			text := strings.Join(q, " ")
			if got, want := disk.SearchText(text, k), mem.SearchText(text, k); !reflect.DeepEqual(got, want) {
				t.Fatalf("SearchText(%q, %d) on disk\n%v\nin memory\n%v", text, k, got, want)
			}
		}
	}
}

// queriesFrom draws queries of 1..6 tokens from the chunks' own words (and
// one unknown word), so they hit.
func queriesFrom(chunks []Chunk, an analysis.Analyzer, n int, seed uint64) [][]string {
	r := rand.New(rand.NewPCG(seed, 1))
	out := make([][]string, 0, n)
	for range n {
		toks := an.Tokenize(chunks[r.IntN(len(chunks))].Text)
		var q []string
		for range 1 + r.IntN(6) {
			if len(toks) > 0 {
				q = append(q, toks[r.IntN(len(toks))])
			}
		}
		if r.IntN(4) == 0 {
			q = append(q, "zzunknownzz")
		}
		out = append(out, q)
	}
	return out
}

func TestDiskIndexRanksAsInMemoryDemoKB(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds the demo KB's on-disk index under every analyzer and window")
	}
	kb := filepath.Join("..", "datasets", "demo", "passages.jsonl")
	for _, tc := range []struct {
		analyzer      string
		words, stride int
	}{{analysis.Plain, 0, 0}, {analysis.English, 0, 0}, {analysis.Plain, 40, 20}} {
		t.Run(fmt.Sprintf("%s/%d", tc.analyzer, tc.words), func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Analyzer, cfg.ChunkWords, cfg.ChunkStride = tc.analyzer, tc.words, tc.stride
			mem, chunks := memoryTwin(t, cfg, kb)
			disk, meta, _ := buildDisk(t, cfg, kb, DiskBuildOptions{BlockDocs: 300, Workers: 3})
			if meta.Layout != "disk" || meta.Docs != len(chunks) {
				t.Fatalf("meta %+v", meta)
			}
			an, _ := analysis.New(cfg.Analyzer)
			compareIndexes(t, disk, mem, chunks, queriesFrom(chunks, an, 100, 7))
		})
	}
}

// TestDiskIndexRanksAsInMemoryZipf: a Zipf corpus in shuffled id order
// (re-read by offset), with titles and passages long enough for more than
// ten windows (chunk "#10" sorts before "#2"), over many small runs; and
// the same corpus built with one worker and one run gives the same sections.
func TestDiskIndexRanksAsInMemoryZipf(t *testing.T) {
	_, texts := corpus.Zipf(5, 1500, 3000, 30, 1.1)
	r := rand.New(rand.NewPCG(9, 9))
	var b strings.Builder
	for _, i := range r.Perm(len(texts)) {
		text := texts[i]
		if i%50 == 0 { // long passages: many windows
			text = strings.Repeat(text+" ", 8)
		}
		fmt.Fprintf(&b, "{\"id\":\"p%d\",\"title\":\"T%d w%d\",\"text\":%q}\n", i, i%7, i%13, text)
	}
	kb := writeFile(t, "kb.jsonl", b.String())
	cfg := DefaultConfig()
	cfg.ChunkWords, cfg.ChunkStride = 12, 8
	mem, chunks := memoryTwin(t, cfg, kb)
	disk, _, _ := buildDisk(t, cfg, kb, DiskBuildOptions{BlockDocs: 97, Workers: 2})
	compareIndexes(t, disk, mem, chunks, corpus.ZipfQueries(4, 200, 3000, 5, 1.1))
	compareIndexes(t, disk, mem, chunks, queriesFrom(chunks, analysis.Analyzer{}, 200, 3))

	one, _, _ := buildDisk(t, cfg, kb, DiskBuildOptions{BlockDocs: 1 << 20, Workers: 1})
	compareIndexes(t, one, mem, chunks, corpus.ZipfQueries(6, 50, 3000, 5, 1.1))
	// the sections (all but the metadata, which holds the build time) are
	// byte-identical whatever the runs and workers
	sa, sb := disk.Sections(), one.Sections()
	for s := range sa {
		if sa[s] != sb[s] || disk.disk.secs[s].sum != one.disk.secs[s].sum {
			t.Fatalf("section %s differs between 97-document runs with 2 workers and one run with 1", sa[s].Name)
		}
	}
}

func TestDiskIndexRefusesDamage(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", "{\"id\":\"a\",\"text\":\"red apple\"}\n{\"id\":\"b\",\"text\":\"green pear\"}\n{\"id\":\"c\",\"text\":\"red pear\"}\n")
	cfg := DefaultConfig()
	ix, _, dir := buildDisk(t, cfg, kb, DiskBuildOptions{})
	path := filepath.Join(dir, DiskIndexFile)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	secs := ix.disk.secs
	damage := func(t *testing.T, mutate func([]byte) []byte) error {
		t.Helper()
		if err := os.WriteFile(path, mutate(append([]byte(nil), good...)), 0o644); err != nil {
			t.Fatal(err)
		}
		ix, _, err := OpenDiskIndex(dir)
		if err != nil {
			return err
		}
		defer ix.Close()
		return VerifyDiskIndex(t.Context(), ix)
	}
	for _, tc := range []struct {
		name, want string
		mutate     func([]byte) []byte
	}{
		{"truncated", "bad magic", func(b []byte) []byte { return b[:len(b)-5] }},
		{"tiny", "shorter than the trailer", func(b []byte) []byte { return b[:10] }},
		{"trailer", "trailer checksum", func(b []byte) []byte { b[len(b)-diskTrailerSize+3] ^= 1; return b }},
		{"metadata", "trailer checksum", func(b []byte) []byte { b[len(b)-diskTrailerSize-2] ^= 1; return b }},
		{"postings", "section postings: checksum", func(b []byte) []byte { b[secs[secPostings].off] ^= 0x40; return b }},
		{"texts", "section texts: checksum", func(b []byte) []byte { b[secs[secTexts].off+2] ^= 1; return b }},
		{"idf", "section idf: checksum", func(b []byte) []byte { b[secs[secIDF].off+7] ^= 1; return b }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := damage(t, tc.mutate)
			if !errors.Is(err, ErrIndexCorrupt) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), path) {
				t.Fatalf("got %v, want %s naming %s", err, tc.want, path)
			}
		})
	}
	t.Run("version", func(t *testing.T) {
		err := damage(t, func(b []byte) []byte {
			tail := b[len(b)-diskTrailerSize+numSections*48+16:]
			tail[0] = 9
			return b
		})
		if err == nil || !strings.Contains(err.Error(), "version 9") {
			t.Fatalf("got %v", err)
		}
	})
}

func TestDiskIndexDuplicateAndBadRecords(t *testing.T) {
	cfg := DefaultConfig()
	for _, tc := range []struct{ kb, want string }{
		{"{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\"y\"}\n\n{\"id\":\"a\",\"text\":\"z\"}\n", `kb.jsonl:4: field "id": duplicate passage id "a" (first at 1)`},
		{"{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\" \"}\n", `kb.jsonl:2: field "text": empty text`},
		{"{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\n", `kb.jsonl:2: unexpected end`},
		{"\n\n", "no passages"},
	} {
		kb := writeFile(t, "kb.jsonl", tc.kb)
		dir := t.TempDir()
		_, err := BuildDiskIndex(t.Context(), cfg, kb, dir, DiskBuildOptions{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Fatalf("%q: got %v, want %q", tc.kb, err, tc.want)
		}
		if HasDiskIndex(dir) {
			t.Fatalf("%q: an index was written despite the error", tc.kb)
		}
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
	_, texts := corpus.Zipf(21, 9000, 4000, 25, 1.1)
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
	loaded, err := corpus.Load(t.Context(), kb)
	if err != nil {
		t.Fatal(err)
	}
	if meta.KBFingerprint != loaded.Fingerprint {
		t.Errorf("fingerprint %s, corpus.Load's %s", meta.KBFingerprint, loaded.Fingerprint)
	}
	compareIndexes(t, disk, mem, chunks, queriesFrom(chunks, analysis.Analyzer{}, 100, 9))
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

// writeKBParquet writes rows {id, title, text} as a Parquet knowledge base.
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
