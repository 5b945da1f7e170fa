package retrieval

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
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
	// the demo KB (2 MiB, 1951 lines: no report between 0 and the end) is scanned first
	checkStage(t, calls, "scan", 2, 2)
	if calls[0].stage != "scan" || calls[len(calls)-1].stage != "merge" {
		t.Errorf("stages out of order: first %q, last %q", calls[0].stage, calls[len(calls)-1].stage)
	}

	calls = nil
	meta, err = BuildIndexDirProgress(t.Context(), cfg, kb, t.TempDir(), record)
	if err != nil {
		t.Fatal(err)
	}
	checkStage(t, calls, "index", meta.Docs, 8192)
}

// The scan of a JSONL KB of a MiB or more reports MiB read, from 0 up to
// the file's size in whole MiB, never going back; a smaller KB, nothing.
func TestScanProgressInMiB(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 2<<20+1000; i++ { // just over 2 MiB
		fmt.Fprintf(&b, "{\"id\": \"p%06d\", \"text\": \"%s\"}\n", i, strings.Repeat(fmt.Sprintf("word%d ", i%97), 60))
	}
	kb := filepath.Join(t.TempDir(), "kb.jsonl")
	if err := os.WriteFile(kb, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	var scans []progressCall
	record := func(stage string, done, total int) {
		if stage == "scan" {
			scans = append(scans, progressCall{stage, done, total})
		}
	}
	if _, err := BuildDiskIndex(t.Context(), DefaultConfig(), kb, t.TempDir(), DiskBuildOptions{Progress: record}); err != nil {
		t.Fatal(err)
	}
	if len(scans) < 3 || scans[0].done != 0 || scans[len(scans)-1].done != 2 {
		t.Fatalf("scan reports %v: want 0 first and 2 (MiB) last", scans)
	}
	for i, c := range scans {
		if c.total != 2 || (i > 0 && c.done < scans[i-1].done) {
			t.Fatalf("scan report %d %+v after %+v", i, c, scans[max(0, i-1)])
		}
	}
	scans = nil
	small := filepath.Join(t.TempDir(), "small.jsonl")
	if err := os.WriteFile(small, []byte(b.String()[:strings.Index(b.String(), "{\"id\": \"p000100\"")]), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := BuildDiskIndex(t.Context(), DefaultConfig(), small, t.TempDir(), DiskBuildOptions{Progress: record}); err != nil {
		t.Fatal(err)
	}
	if len(scans) != 0 {
		t.Errorf("scan reports for a KB under a MiB: %v", scans)
	}
}
