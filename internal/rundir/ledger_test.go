package rundir

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/atomicfile"
)

func TestParseLedgerName(t *testing.T) {
	cases := []struct {
		name        string
		first, last int
		ok          bool
	}{
		{"steps-000001-000025.parquet", 1, 25, true},
		{"steps-000007-000007.parquet", 7, 7, true},
		{"step-000004.parquet", 4, 4, true}, // an older himes's one-step file
		{"steps-000009-000003.parquet", 0, 0, false},
		{"steps-000000-000003.parquet", 0, 0, false},
		{"step-000000.parquet", 0, 0, false},
		{"steps-1-3.parquet", 0, 0, false},
		{"steps-000001-000025.parquet.stale", 0, 0, false},
		{".steps-000001-000025.parquet.tmp-123", 0, 0, false},
		{"rollouts.parquet", 0, 0, false},
	}
	for _, c := range cases {
		first, last, ok := ParseLedgerName(c.name)
		if first != c.first || last != c.last || ok != c.ok {
			t.Errorf("%s: got %d %d %v, want %d %d %v", c.name, first, last, ok, c.first, c.last, c.ok)
		}
	}
	if n := LedgerName(3, 12); n != "steps-000003-000012.parquet" {
		t.Errorf("LedgerName(3, 12) = %s", n)
	}
}

// A chunk of steps is covered by the first checkpoint at or after its last
// step, with the checksum of the bytes written (not read back), and a
// checkpoint in the middle of a written chunk is refused.
func TestWriteLedgerChunksAreCoveredWhole(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	data := []byte("three steps of rollouts")
	if err := r.WriteLedger(1, 3, data); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(r.LedgerFile(1, 3)); err != nil || string(got) != string(data) {
		t.Fatalf("ledger file: %q, %v", got, err)
	}
	if _, err := r.SaveState(2, testState{Step: 2}, 0); err == nil || !strings.Contains(err.Error(), "steps-000001-000003.parquet holds steps after step 2") {
		t.Fatalf("checkpoint inside a chunk: got %v", err)
	}
	if _, err := r.SaveState(3, testState{Step: 3}, 0); err != nil {
		t.Fatal(err)
	}
	var f struct {
		Ledgers map[string]string `json:"ledgers"`
	}
	b, _ := os.ReadFile(r.statePath(3))
	if err := json.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	if want := map[string]string{"steps-000001-000003.parquet": sha256Hex(string(data))}; !reflect.DeepEqual(f.Ledgers, want) {
		t.Fatalf("ledgers %v, want %v", f.Ledgers, want)
	}
	// The recorded checksum is checked against the file on resume.
	editFile(t, r.LedgerFile(1, 3), func(s string) string { return s[:5] })
	if _, step, err := LoadState(r, math.MaxInt, checkStep); err == nil || step != -1 || !strings.Contains(err.Error(), "changed after checkpoint") {
		t.Fatalf("damaged chunk: step %d, %v", step, err)
	}
}

// An older himes's one-step ledgers keep being covered and verified, next to
// new chunks.
func TestOldOneStepLedgersStillVerified(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	old := filepath.Join(r.Path, "ledger", "step-000001.parquet")
	if err := atomicfile.WriteFile(old, []byte("old step 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SaveState(1, testState{Step: 1}, 0); err != nil {
		t.Fatal(err)
	}
	if err := r.WriteLedger(2, 3, []byte("new 2..3")); err != nil {
		t.Fatal(err)
	}
	if _, err := r.SaveState(3, testState{Step: 3}, 0); err != nil {
		t.Fatal(err)
	}
	files, err := LedgerFiles(r.Path)
	if err != nil || len(files) != 2 || files[0].Path != old || files[0].First != 1 || files[1].First != 2 || files[1].Last != 3 {
		t.Fatalf("ledger files %+v, %v", files, err)
	}
	r.Close()
	r2 := mustOpen(t, filepath.Dir(r.Path), "run", Resume)
	if _, step, err := LoadState(r2, math.MaxInt, checkStep); err != nil || step != 3 {
		t.Fatalf("resume: step %d, %v", step, err)
	}
	editFile(t, old, func(s string) string { return s + "!" })
	if _, step, err := LoadState(r2, math.MaxInt, checkStep); err == nil || step != -1 || !strings.Contains(err.Error(), "step-000001.parquet changed") {
		t.Fatalf("damaged old ledger: step %d, %v", step, err)
	}
}

// Adopt sets aside the ledgers of the steps after the adopted checkpoint, so
// a reader never sees a step twice once the resumed run writes it again; a
// directory that holds a step twice anyway is refused by LedgerFiles.
func TestAdoptSetsAsideLaterLedgers(t *testing.T) {
	r := mustOpen(t, t.TempDir(), "run", New)
	for _, s := range [][2]int{{1, 2}, {3, 4}, {5, 6}} {
		if err := r.WriteLedger(s[0], s[1], []byte{byte(s[0])}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := r.SaveState(2, testState{Step: 2}, 0); err != nil {
		t.Fatal(err)
	}
	r.Close()
	r2 := mustOpen(t, filepath.Dir(r.Path), "run", Resume)
	if _, step, err := LoadState(r2, math.MaxInt, checkStep); err != nil || step != 2 {
		t.Fatalf("resume: step %d, %v", step, err)
	}
	if err := r2.Adopt(2); err != nil {
		t.Fatal(err)
	}
	files, err := LedgerFiles(r2.Path)
	if err != nil || len(files) != 1 || files[0].Last != 2 {
		t.Fatalf("after Adopt(2): %+v, %v", files, err)
	}
	for _, n := range []string{"steps-000003-000004.parquet.stale", "steps-000005-000006.parquet.stale"} {
		if _, err := os.Stat(filepath.Join(r2.Path, "ledger", n)); err != nil {
			t.Errorf("%s: %v", n, err)
		}
	}
	// Steps 3..5 written again in other chunks are covered; the set-aside
	// files are not.
	if err := r2.WriteLedger(3, 5, []byte("again")); err != nil {
		t.Fatal(err)
	}
	covered, err := r2.coveredLedgers(5)
	if err != nil || len(covered) != 2 || covered["steps-000003-000005.parquet"] != sha256Hex("again") {
		t.Fatalf("covered %v, %v", covered, err)
	}
	if err := atomicfile.WriteFile(filepath.Join(r2.Path, "ledger", "step-000004.parquet"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LedgerFiles(r2.Path); err == nil || !strings.Contains(err.Error(), "hold the same steps") {
		t.Fatalf("overlapping ledgers: got %v", err)
	}
}
