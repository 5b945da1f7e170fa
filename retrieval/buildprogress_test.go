package retrieval

import (
	"path/filepath"
	"testing"
)

type progressCall struct {
	stage       string
	done, total int
}

// checkStage checks that a stage's calls count up to its total in steps of
// at most step, and returns how many there were.
func checkStage(t *testing.T, calls []progressCall, stage string, total, step int) int {
	t.Helper()
	prev, n := -1, 0
	for _, c := range calls {
		if c.stage != stage {
			continue
		}
		n++
		if n == 1 && c.done != 0 {
			t.Fatalf("%s starts at %d, want 0", stage, c.done)
		}
		if c.total != total || c.done <= prev || (n > 1 && c.done-prev > step) {
			t.Fatalf("%s: %d/%d after %d (want totals %d, steps of at most %d)", stage, c.done, c.total, prev, total, step)
		}
		prev = c.done
	}
	if prev != total {
		t.Fatalf("%s ended at %d of %d", stage, prev, total)
	}
	return n
}

func TestBuildProgress(t *testing.T) {
	kb := filepath.Join("..", "datasets", "demo", "passages.jsonl")
	cfg := DefaultConfig()
	var calls []progressCall
	record := func(stage string, done, total int) { calls = append(calls, progressCall{stage, done, total}) }

	meta, err := BuildDiskIndex(t.Context(), cfg, kb, t.TempDir(), DiskBuildOptions{BlockDocs: 300, Workers: 2, Progress: record})
	if err != nil {
		t.Fatal(err)
	}
	// blocks of 300 chunks, then terms in steps of 4096; analyze comes first
	if n := checkStage(t, calls, "analyze", meta.Docs, 300); n != 1+(meta.Docs+299)/300 {
		t.Errorf("%d analyze calls for %d chunks in blocks of 300", n, meta.Docs)
	}
	checkStage(t, calls, "merge", meta.Terms, 4096)
	if calls[0].stage != "analyze" || calls[len(calls)-1].stage != "merge" {
		t.Errorf("stages out of order: first %q, last %q", calls[0].stage, calls[len(calls)-1].stage)
	}

	calls = nil
	meta, err = BuildIndexDirProgress(t.Context(), cfg, kb, t.TempDir(), record)
	if err != nil {
		t.Fatal(err)
	}
	checkStage(t, calls, "index", meta.Docs, 8192)
}
