package rundir

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/atomicfile"
)

func mustOpen(t *testing.T, base, name string, mode Mode) *RunDir {
	t.Helper()
	r, err := Open(base, name, mode)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

func TestOpenModes(t *testing.T) {
	base := t.TempDir()
	r := mustOpen(t, base, "a", New)
	if err := atomicfile.WriteFile(r.File("x"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := Open(base, "a", New); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("existing run dir must be refused with a hint, got %v", err)
	}
	if _, err := Open(base, "b", Resume); err == nil {
		t.Fatal("resume of a missing run must fail")
	}
	if _, err := os.Stat(filepath.Join(base, "b")); !os.IsNotExist(err) {
		t.Fatal("a refused resume must not create the directory")
	}
	r2 := mustOpen(t, base, "a", Resume)
	if _, err := os.Stat(r.File("x")); err != nil {
		t.Fatal("resume must keep files")
	}
	if r2.Generation() != 1 {
		t.Fatalf("first resume: generation %d, want 1", r2.Generation())
	}
	r2.Close()
	r3 := mustOpen(t, base, "a", Resume)
	if r3.Generation() != 2 {
		t.Fatalf("second resume: generation %d, want 2", r3.Generation())
	}
	r3.Close()
	r4 := mustOpen(t, base, "a", Overwrite)
	if _, err := os.Stat(r.File("x")); !os.IsNotExist(err) {
		t.Fatal("overwrite must clear the directory")
	}
	if r4.Generation() != 0 {
		t.Fatalf("overwritten run: generation %d, want 0", r4.Generation())
	}
}

// Item 4 of issue 14: two processes on one run directory both ran.
func TestSecondOpenOfARunInUseFails(t *testing.T) {
	base := t.TempDir()
	r := mustOpen(t, base, "a", New)
	want := fmt.Sprintf("in use by pid %d", os.Getpid())
	for _, mode := range []Mode{Resume, Overwrite} {
		if _, err := Open(base, "a", mode); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("mode %d: second open of a locked run: got %v, want %q", mode, err, want)
		}
		if err := Check(base, "a", mode); err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("mode %d: Check of a locked run: got %v, want %q", mode, err, want)
		}
	}
	if _, err := os.Stat(r.File("state")); err != nil {
		t.Fatal("a refused --overwrite must not touch the run in use:", err)
	}
	r.Close()
	if err := Check(base, "a", Resume); err != nil {
		t.Fatalf("after Close the run is free: %v", err)
	}
	mustOpen(t, base, "a", Resume)
}

// Item 5 of issue 14: --overwrite deleted any directory recursively.
func TestOverwriteRefusesADirectoryHimesDidNotMake(t *testing.T) {
	base := t.TempDir()
	photos := filepath.Join(base, "photos")
	if err := os.MkdirAll(filepath.Join(photos, "2024"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"a.jpg", "2024/b.jpg"} {
		if err := os.WriteFile(filepath.Join(photos, f), []byte("jpeg"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, mode := range []Mode{Overwrite, New, Resume} {
		if _, err := Open(base, "photos", mode); err == nil || !strings.Contains(err.Error(), "not a himes run directory") {
			t.Fatalf("mode %d on a foreign directory: got %v", mode, err)
		}
	}
	entries, _ := os.ReadDir(photos)
	if len(entries) != 2 {
		t.Fatalf("the foreign directory changed: %v", entries)
	}
	if _, err := os.Stat(filepath.Join(photos, "2024", "b.jpg")); err != nil {
		t.Fatal(err)
	}

	// An empty directory is fine to use, in every creating mode.
	for _, mode := range []Mode{New, Overwrite} {
		name := fmt.Sprintf("empty%d", mode)
		if err := os.Mkdir(filepath.Join(base, name), 0o755); err != nil {
			t.Fatal(err)
		}
		mustOpen(t, base, name, mode).Close()
	}

	// A run directory of an older himes (no marker) is recognized by its layout.
	old := filepath.Join(base, "old")
	for _, p := range []string{"state", "ledger"} {
		if err := os.MkdirAll(filepath.Join(old, p), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"config.yaml", "version.json", "metrics.jsonl"} {
		if err := os.WriteFile(filepath.Join(old, f), []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	mustOpen(t, base, "old", Overwrite)
	if _, err := os.Stat(filepath.Join(old, "metrics.jsonl")); !os.IsNotExist(err) {
		t.Fatal("overwrite of an older run directory must clear it")
	}
}

func TestDiscardRemovesWhatTheRunCreated(t *testing.T) {
	base := t.TempDir()
	r := mustOpen(t, base, "a", New)
	if err := atomicfile.WriteFile(r.File("config.yaml"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.Discard(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Path); !os.IsNotExist(err) {
		t.Fatalf("discarded run directory still there: %v", err)
	}
	// A directory that existed before (empty) is kept, emptied.
	if err := os.Mkdir(filepath.Join(base, "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	r = mustOpen(t, base, "b", New)
	if err := r.Discard(); err != nil {
		t.Fatal(err)
	}
	if entries, err := os.ReadDir(r.Path); err != nil || len(entries) != 0 {
		t.Fatalf("pre-existing directory: %v %v, want it kept and empty", entries, err)
	}
	mustOpen(t, base, "b", New).Close()
	r = mustOpen(t, base, "b", Resume)
	if err := r.Discard(); err == nil {
		t.Fatal("a resumed run must never be discarded")
	}
}

// Item 10 of issue 14: a symlinked state/ made retention delete files in
// its target.
func TestRetentionNeverFollowsSymlinks(t *testing.T) {
	base := t.TempDir()
	victim := filepath.Join(base, "victim")
	if err := os.Mkdir(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	victimFiles := []string{"step-000001.json", "step-000002.json", "notes.txt"}
	for _, f := range victimFiles {
		if err := os.WriteFile(filepath.Join(victim, f), []byte("keep me"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := mustOpen(t, base, "a", New)
	// state/ replaced by a link while the run is open.
	if err := os.RemoveAll(r.File("state")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(victim, r.File("state")); err != nil {
		t.Fatal(err)
	}
	for step := 1; step <= 4; step++ {
		if _, err := r.SaveState(step, map[string]int{"step": step}, 1); err == nil {
			t.Fatal("saving into a symlinked state/ must fail")
		}
	}
	r.Close()
	// Reopening refuses the link outright.
	if _, err := Open(base, "a", Resume); err == nil || !strings.Contains(err.Error(), "symbolic link") {
		t.Fatalf("resume with a symlinked state/: got %v", err)
	}
	for _, f := range victimFiles {
		if b, err := os.ReadFile(filepath.Join(victim, f)); err != nil || string(b) != "keep me" {
			t.Fatalf("file %s in the link's target was touched: %q %v", f, b, err)
		}
	}
	if entries, _ := os.ReadDir(victim); len(entries) != len(victimFiles) {
		t.Fatalf("files were added to the link's target: %v", entries)
	}

	// A link inside a real state/ is left alone by retention.
	r = mustOpen(t, base, "b", New)
	if err := os.Symlink(filepath.Join(victim, "step-000001.json"), filepath.Join(r.Path, "state", "step-000001.json")); err != nil {
		t.Fatal(err)
	}
	for step := 2; step <= 4; step++ {
		if _, err := r.SaveState(step, map[string]int{"step": step}, 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := os.Stat(filepath.Join(victim, "step-000001.json")); err != nil {
		t.Fatal("retention deleted the target of a link:", err)
	}
	if _, err := os.Lstat(filepath.Join(r.Path, "state", "step-000001.json")); err != nil {
		t.Fatal("retention removed a link it should leave alone:", err)
	}
}

type testState struct {
	Step int    `json:"step"`
	Note string `json:"note"`
}

func checkStep(step int, st *testState) error {
	if st.Step != step {
		return fmt.Errorf("field step is %d, file name says %d", st.Step, step)
	}
	return nil
}

func TestStateRetention(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	var pruned []int
	for step := 1; step <= 5; step++ {
		p, err := r.SaveState(step, testState{Step: step}, 2)
		if err != nil {
			t.Fatal(err)
		}
		pruned = append(pruned, p...)
	}
	if len(pruned) != 3 || pruned[0] != 1 || pruned[2] != 3 {
		t.Fatalf("pruned %v, want [1 2 3]", pruned)
	}
	steps, _ := r.StateSteps()
	if len(steps) != 2 || steps[0] != 4 || steps[1] != 5 {
		t.Fatalf("kept %v, want [4 5]", steps)
	}
	st, step, err := LoadState(r, math.MaxInt, checkStep)
	if err != nil || step != 5 || st.Step != 5 {
		t.Fatalf("latest = %d %v %v", step, st, err)
	}
}

// writeLedgers writes a fake ledger file per step.
func writeLedgers(t *testing.T, r *RunDir, steps int) {
	t.Helper()
	for s := 1; s <= steps; s++ {
		if err := atomicfile.WriteFile(r.LedgerFile(s, s), []byte(strings.Repeat(fmt.Sprint(s), 100)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// savedRun is a run with ledgers and checkpoints after steps 0..3.
func savedRun(t *testing.T) *RunDir {
	t.Helper()
	r := mustOpen(t, t.TempDir(), "run", New)
	writeLedgers(t, r, 3)
	for step := 0; step <= 3; step++ {
		if _, err := r.SaveState(step, testState{Step: step, Note: "n"}, 0); err != nil {
			t.Fatal(err)
		}
	}
	return r
}

func editFile(t *testing.T, path string, edit func(string) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := edit(string(b))
	if out == string(b) {
		t.Fatalf("edit of %s changed nothing", path)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Item 7 of issue 14: resume trusted hand-corrupted state.
func TestLoadStateFallsBackPastInvalidCheckpoints(t *testing.T) {
	cases := []struct {
		name    string
		corrupt func(t *testing.T, r *RunDir)
		want    int // step resumed from
	}{
		{"edited step field", func(t *testing.T, r *RunDir) {
			editFile(t, r.statePath(3), func(s string) string { return regexp.MustCompile(`"step":\s*3`).ReplaceAllString(s, `"step": 2`) })
		}, 2},
		{"edited note, valid JSON", func(t *testing.T, r *RunDir) {
			editFile(t, r.statePath(3), func(s string) string { return regexp.MustCompile(`"note":\s*"n"`).ReplaceAllString(s, `"note": "m"`) })
		}, 2},
		{"empty object", func(t *testing.T, r *RunDir) {
			editFile(t, r.statePath(3), func(string) string { return "{}" })
		}, 2},
		{"truncated state file", func(t *testing.T, r *RunDir) {
			editFile(t, r.statePath(3), func(s string) string { return s[:len(s)/2] })
		}, 2},
		{"truncated ledger of the newest step", func(t *testing.T, r *RunDir) {
			editFile(t, r.LedgerFile(3, 3), func(s string) string { return s[:10] })
		}, 2},
		{"deleted ledger of step 2", func(t *testing.T, r *RunDir) {
			if err := os.Remove(r.LedgerFile(2, 2)); err != nil {
				t.Fatal(err)
			}
		}, 1},
		{"altered ledger of step 1", func(t *testing.T, r *RunDir) {
			editFile(t, r.LedgerFile(1, 1), func(s string) string { return "2" + s[1:] })
		}, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := savedRun(t)
			c.corrupt(t, r)
			st, step, err := LoadState(r, math.MaxInt, checkStep)
			if err != nil {
				t.Fatal(err)
			}
			if step != c.want || st.Step != c.want || st.Note != "n" {
				t.Fatalf("resumed from step %d (%+v), want %d", step, st, c.want)
			}
			if err := r.Adopt(step); err != nil {
				t.Fatal(err)
			}
			steps, _ := r.StateSteps()
			if steps[len(steps)-1] != c.want {
				t.Fatalf("after Adopt the newest checkpoint is %v, want %d", steps, c.want)
			}
			if _, err := os.Stat(r.statePath(3) + ".invalid"); err != nil {
				t.Fatal("the newest checkpoint must be set aside, not deleted:", err)
			}
		})
	}
}

func TestLoadStateFailsWhenNoCheckpointIsValid(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	if _, step, err := LoadState(r, math.MaxInt, checkStep); step != -1 || err != nil {
		t.Fatalf("no checkpoint at all: step %d err %v, want -1 and no error", step, err)
	}
	writeLedgers(t, r, 2)
	for step := 1; step <= 2; step++ {
		if _, err := r.SaveState(step, testState{Step: step}, 0); err != nil {
			t.Fatal(err)
		}
	}
	editFile(t, r.LedgerFile(1, 1), func(s string) string { return s + "x" })
	_, step, err := LoadState(r, math.MaxInt, checkStep)
	if err == nil || step != -1 {
		t.Fatalf("every checkpoint covers the damaged ledger: got step %d err %v", step, err)
	}
	for _, want := range []string{"step 2:", "step 1:", "steps-000001-000001.parquet changed"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	// A check that refuses the state's fields also makes it invalid.
	editFile(t, r.LedgerFile(1, 1), func(s string) string { return s[:len(s)-1] })
	refuse := func(int, *testState) error { return fmt.Errorf("field cursor: out of range") }
	if _, _, err := LoadState(r, math.MaxInt, refuse); err == nil || !strings.Contains(err.Error(), "field cursor") {
		t.Fatalf("check's error: got %v", err)
	}
	// before restricts the search to older checkpoints.
	if _, step, err := LoadState(r, 2, checkStep); err != nil || step != 1 {
		t.Fatalf("before=2: step %d err %v, want 1", step, err)
	}
}

// The checksum covers the state and the ledgers, independently of the
// file's indentation: recompute it by hand for one file.
func TestStateChecksumIsOverStateAndLedgers(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	writeLedgers(t, r, 1)
	if _, err := r.SaveState(1, testState{Step: 1}, 0); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(r.statePath(1))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Format  string            `json:"format"`
		SHA256  string            `json:"sha256"`
		Ledgers map[string]string `json:"ledgers"`
	}
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	ledger := sha256Hex(strings.Repeat("1", 100))
	if len(f.Ledgers) != 1 || f.Ledgers["steps-000001-000001.parquet"] != ledger {
		t.Fatalf("ledgers %v, want steps-000001-000001.parquet → %s", f.Ledgers, ledger)
	}
	want := sha256Hex("himes-state/1\n" + `{"step":1,"note":""}` + "\n" + "steps-000001-000001.parquet " + ledger + "\n")
	if f.SHA256 != want || f.Format != "himes-state/1" {
		t.Fatalf("sha256 %s format %s, want %s", f.SHA256, f.Format, want)
	}
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// Item 1 of issue 33: of two fresh starts racing on one run directory, the
// loser removed the winner's lock file, so a third process (--overwrite)
// then ran alongside the live run and replaced its data. The race is made
// certain by a hook that runs the winner's whole Open between the loser's
// check of the directory and its lock.
func TestLosingFreshStartKeepsTheWinnersLock(t *testing.T) {
	base := t.TempDir()
	var winner *RunDir
	_, err := open(base, "a", New, func() {
		var werr error
		if winner, werr = Open(base, "a", New); werr != nil {
			t.Errorf("winner: %v", werr)
		}
	})
	if winner == nil {
		t.FailNow()
	}
	defer winner.Close()
	if err == nil || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("the losing fresh start must be refused as in use, got %v", err)
	}
	if _, err := os.Stat(filepath.Join(base, "a", lockName)); err != nil {
		t.Fatalf("the loser removed the winner's lock file: %v", err)
	}
	for _, mode := range []Mode{Overwrite, Resume} {
		if r, err := Open(base, "a", mode); err == nil {
			r.Close()
			t.Fatalf("mode %d opened the run directory while the winner holds it", mode)
		} else if !strings.Contains(err.Error(), "in use by pid") {
			t.Fatalf("mode %d: want the in-use refusal, got %v", mode, err)
		}
	}
	if _, err := os.Stat(winner.File(markerName)); err != nil {
		t.Fatalf("the winner's marker is gone: %v", err)
	}
}
