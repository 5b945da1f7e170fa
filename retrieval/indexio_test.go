package retrieval

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval/corpus"
)

func TestIndexPersistRoundTripAndCorruption(t *testing.T) {
	ids, texts := corpus.Zipf(5, 500, 300, 30, 1.1)
	ix, err := BuildIndex(ids, texts, BM25Params{K1: 1.2, B: 0.75})
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := SaveIndex(t.Context(), dir, ix, IndexMeta{KBFingerprint: "abc"}); err != nil {
		t.Fatal(err)
	}
	back, meta, err := LoadIndex(t.Context(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if meta.KBFingerprint != "abc" || meta.Params != (BM25Params{K1: 1.2, B: 0.75}) || meta.Docs != 500 {
		t.Fatalf("meta = %+v", meta)
	}
	for _, q := range corpus.ZipfQueries(9, 50, 300, 0, 1.1) {
		a, b := ix.Search(q, 10), back.Search(q, 10)
		if len(a) != len(b) {
			t.Fatalf("query %v: %d vs %d hits after reload", q, len(a), len(b))
		}
		for i := range a {
			if a[i] != b[i] {
				t.Fatalf("query %v rank %d: %+v before, %+v after reload", q, i, a[i], b[i])
			}
		}
	}
	path := filepath.Join(dir, IndexFile)
	raw, _ := os.ReadFile(path)
	// flip one byte in the middle: the checksum must catch it
	bad := append([]byte(nil), raw...)
	bad[len(bad)/2] ^= 0x40
	os.WriteFile(path, bad, 0o644)
	if _, _, err := LoadIndex(t.Context(), dir); !errors.Is(err, ErrIndexCorrupt) {
		t.Fatalf("flipped byte: got %v, want ErrIndexCorrupt", err)
	}
	os.WriteFile(path, raw[:len(raw)-100], 0o644)
	if _, _, err := LoadIndex(t.Context(), dir); !errors.Is(err, ErrIndexCorrupt) {
		t.Fatalf("truncated: got %v, want ErrIndexCorrupt", err)
	}
	// another format version is refused with a rebuild hint
	old := append([]byte(nil), raw...)
	old[8] = 99
	os.WriteFile(path, old, 0o644)
	if _, _, err := LoadIndex(t.Context(), dir); err == nil || !strings.Contains(err.Error(), "version 99") {
		t.Fatalf("version 99: got %v", err)
	}
}

func TestOpenRejectsStaleIndex(t *testing.T) {
	kb1 := writeFile(t, "kb.jsonl", "{\"id\":\"a\",\"text\":\"red apple\"}\n{\"id\":\"b\",\"text\":\"green pear\"}\n")
	cfg := DefaultConfig()
	cfg.TopK, cfg.Candidates = 1, 2
	p, err := Open(t.Context(), cfg, kb1)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := SaveIndex(t.Context(), dir, p.Index(), IndexMeta{KBFingerprint: p.KB().Fingerprint}); err != nil {
		t.Fatal(err)
	}
	cfg.Index = dir
	if _, err := Open(t.Context(), cfg, kb1); err != nil {
		t.Fatalf("fresh index refused: %v", err)
	}
	other := cfg
	other.K1 = 1.5
	if _, err := Open(t.Context(), other, kb1); err == nil || !strings.Contains(err.Error(), "k1=0.9") {
		t.Fatalf("index with other k1: got %v", err)
	}
	other = cfg
	other.Analyzer = analysis.English
	if _, err := Open(t.Context(), other, kb1); err == nil || !strings.Contains(err.Error(), "analyzer") {
		t.Fatalf("index with another analyzer: got %v", err)
	}
	// same ids, edited text: the fingerprint changes
	if err := os.WriteFile(kb1, []byte("{\"id\":\"a\",\"text\":\"red apple pie\"}\n{\"id\":\"b\",\"text\":\"green pear\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(t.Context(), cfg, kb1); err == nil || !strings.Contains(err.Error(), "stale") {
		t.Fatalf("stale index: got %v", err)
	}
}

// TestBuildDeterministicAcrossWorkers: parallel analysis must not change
// the index (term numbering is first appearance in document order).
func TestBuildDeterministicAcrossWorkers(t *testing.T) {
	ids, texts := corpus.Zipf(3, 20000, 5000, 20, 1.1)
	var files [][]byte
	for _, procs := range []int{1, 3} {
		old := runtime.GOMAXPROCS(procs)
		ix, err := BuildIndex(ids, texts, BM25Params{K1: 0.9, B: 0.4})
		runtime.GOMAXPROCS(old)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := SaveIndex(t.Context(), dir, ix, IndexMeta{KBFingerprint: "x"}); err != nil {
			t.Fatal(err)
		}
		raw, err := os.ReadFile(filepath.Join(dir, IndexFile))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, raw)
	}
	if !bytes.Equal(files[0], files[1]) {
		t.Fatal("index differs between 1 and 3 analysis workers")
	}
}
