package rundir

import (
	"github.com/himes-rl/himes/internal/atomicfile"
	"os"
	"strings"
	"testing"
)

func TestOpenModes(t *testing.T) {
	base := t.TempDir()
	r, err := Open(base, "a", New)
	if err != nil {
		t.Fatal(err)
	}
	if err := atomicfile.WriteFile(r.File("x"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(base, "a", New); err == nil || !strings.Contains(err.Error(), "--resume") {
		t.Fatalf("existing run dir must be refused with a hint, got %v", err)
	}
	if _, err := Open(base, "b", Resume); err == nil {
		t.Fatal("resume of a missing run must fail")
	}
	if _, err := Open(base, "a", Resume); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.File("x")); err != nil {
		t.Fatal("resume must keep files")
	}
	if _, err := Open(base, "a", Overwrite); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.File("x")); !os.IsNotExist(err) {
		t.Fatal("overwrite must clear the directory")
	}
}

func TestStateRetention(t *testing.T) {
	r, err := Open(t.TempDir(), "run", New)
	if err != nil {
		t.Fatal(err)
	}
	var pruned []int
	for step := 1; step <= 5; step++ {
		p, err := r.SaveState(step, map[string]int{"step": step}, 2)
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
	var st map[string]int
	step, err := r.LoadLatestState(&st)
	if err != nil || step != 5 || st["step"] != 5 {
		t.Fatalf("latest = %d %v %v", step, st, err)
	}
}
