package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/sharedtest"
)

// listTree lists the files under dir, relative and sorted.
func listTree(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(dir, func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(dir, path)
		out = append(out, rel)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

// TestEvalReplacesItsFolder: a second evaluation into the same folder with
// fewer systems leaves exactly its own files (no runs/gold.trec of the first).
func TestEvalReplacesItsFolder(t *testing.T) {
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	parent := t.TempDir()
	out := filepath.Join(parent, "ev")
	eval := func(rewriters string) {
		t.Helper()
		if _, err := runCLI(t, "eval", "--config", cfg, "--rewriter", rewriters, "--limit", "2", "--resamples", "20", "--out", out); err != nil {
			t.Fatalf("eval --rewriter %s: %v", rewriters, err)
		}
	}
	eval("raw,gold")
	want := []string{evaluate.OutputMarker, "qrels.txt", "runs/gold.trec", "runs/raw.trec", "summary.json", "summary.md", "turns.parquet"}
	if got := listTree(t, out); !slices.Equal(got, want) {
		t.Fatalf("first eval wrote %v, want %v", got, want)
	}
	eval("raw")
	want = slices.DeleteFunc(want, func(s string) bool { return s == "runs/gold.trec" })
	if got := listTree(t, out); !slices.Equal(got, want) {
		t.Fatalf("second eval left %v, want %v", got, want)
	}
	var rep evaluate.Report
	readEvalJSON(t, filepath.Join(out, "summary.json"), &rep)
	if len(rep.Systems) != 1 || rep.Systems[0].Name != "raw" {
		t.Fatalf("summary of the second eval: %+v", rep.Systems)
	}
	if entries, err := os.ReadDir(parent); err != nil || len(entries) != 1 {
		t.Fatalf("siblings left beside the eval folder: %v %v", entries, err)
	}
}
