package hser

import (
	"os"
	"path/filepath"
	"testing"
)

// sharedPath finds ../shared/<rel> from the repository root, walking up from
// the package directory to the directory that holds go.mod.
func sharedPath(t testing.TB, rel string) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "..", "shared", rel)
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatalf("no go.mod above the test directory")
		}
		dir = parent
	}
}

func mustScorer(t testing.TB, cfg Config) *Scorer {
	t.Helper()
	s, err := NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func rougeCfg(stem bool) Config {
	c := DefaultConfig()
	c.Tokenizer = TokenizerRougeScore
	c.Stem = stem
	return c
}
