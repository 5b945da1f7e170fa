package main

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/himes-rl/himes/configs"
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
		if _, err := runCLI(t, "eval", "--config", cfg, "--rewriter", rewriters, "--limit", "2", "--resamples", "40", "--out", out,
			"--set", "retrieval.top_k=2"); err != nil {
			t.Fatalf("eval --rewriter %s: %v", rewriters, err)
		}
	}
	eval("raw,gold")
	want := []string{evaluate.OutputMarker, "config.yaml", "qrels.txt", "runs/gold.trec", "runs/raw.trec", "summary.json", "summary.md",
		"turns.parquet", "version.json"}
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
	// The folder says what produced it: the resolved config with the --set
	// applied (read back as a run snapshot), the version, and the retrieval.
	snap, err := configs.LoadRunSnapshot(out)
	if err != nil || snap.Retrieval.TopK != 2 || snap.Retrieval.Method != "bm25" {
		t.Fatalf("config.yaml: top_k %d, method %q, %v; want the --set top_k 2 and bm25", snap.Retrieval.TopK, snap.Retrieval.Method, err)
	}
	if r := rep.Retrieval; r.Method != "bm25" || r.TopK != 2 || r.Candidates != snap.Retrieval.Candidates || r.Embedder != "" || r.MemoryEmbedder != "" {
		t.Fatalf("summary.json retrieval: %+v", r)
	}
	var version map[string]any
	readEvalJSON(t, filepath.Join(out, "version.json"), &version)
	if len(version) == 0 {
		t.Fatal("version.json is empty")
	}
	if entries, err := os.ReadDir(parent); err != nil || len(entries) != 1 {
		t.Fatalf("siblings left beside the eval folder: %v %v", entries, err)
	}
}
