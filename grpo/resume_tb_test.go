package grpo

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/tbevent"
)

// Item 5 of issue 33: a TensorBoard events file cut by a full disk kept its
// partial record through --resume, unreported. A run trains 3 steps with
// TensorBoard on, its events file is cut 7 bytes into its last record's end
// (a partial record), and the resume must cut it back to whole records,
// leave nothing for a second repair to find, and name the file in
// status.json's warnings.
func TestResumeRepairsACutTensorBoardFile(t *testing.T) {
	base, run, pol := freshRun(t)
	cfg := testConfig()
	cfg.Steps = 3
	l := newTestLoop(t, cfg, pol, run)
	l.deps.Tracker = tbTracker{tbevent.NewRun(run.File("tb"))}
	if err := l.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	run.Close()
	paths, _ := filepath.Glob(filepath.Join(base, "r", "tb", "events.out.tfevents.*"))
	if len(paths) != 1 {
		t.Fatalf("events files %v, want one", paths)
	}
	fi, err := os.Stat(paths[0])
	if err != nil {
		t.Fatal(err)
	}
	cut := fi.Size() - 7
	if err := os.Truncate(paths[0], cut); err != nil {
		t.Fatal(err)
	}
	err = resumeRun(t, base, 4, pol, func(l *Loop) {
		l.deps.Tracker = tbTracker{tbevent.NewRun(l.deps.Run.File("tb"))}
	})
	if err != nil {
		t.Fatal(err)
	}
	fi, err = os.Stat(paths[0])
	if err != nil || fi.Size() >= cut || fi.Size() == 0 {
		t.Fatalf("the cut file is %v (%v) after the resume, want fewer than %d bytes (its whole records)", fi, err, cut)
	}
	if reps, err := tbevent.RepairDir(filepath.Join(base, "r", "tb")); err != nil || len(reps) != 0 {
		t.Fatalf("after the resume: repairs %v (%v), want none", reps, err)
	}
	st, ok, err := ReadStatus(filepath.Join(base, "r"))
	if err != nil || !ok {
		t.Fatalf("status: %v %v", ok, err)
	}
	found := false
	for _, w := range st.Warnings {
		found = found || (strings.Contains(w, "tensorboard events file repaired on resume") && strings.Contains(w, paths[0]) && strings.Contains(w, "a partial record"))
	}
	if !found {
		t.Fatalf("status.json warnings %q do not report the repair of %s", st.Warnings, paths[0])
	}
}
