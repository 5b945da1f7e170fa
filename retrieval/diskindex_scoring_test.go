package retrieval

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The on-disk index scores exactly; a Lucene-parity config must be refused
// at build time, not silently built with the other formula.
func TestDiskIndexRefusesLuceneScoring(t *testing.T) {
	dir := t.TempDir()
	kb := filepath.Join(dir, "kb.jsonl")
	if err := os.WriteFile(kb, []byte(`{"id": "p1", "text": "bronze age collapse"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Scoring = ScoringLucene
	_, err := BuildDiskIndex(context.Background(), cfg, kb, filepath.Join(dir, "ix"), DiskBuildOptions{})
	if err == nil || !strings.Contains(err.Error(), "not supported by the on-disk index") {
		t.Fatalf("lucene scoring on disk: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "ix", DiskIndexFile)); !os.IsNotExist(err) {
		t.Errorf("an index file was written: %v", err)
	}
}
