package grpo

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

// interruptingSaver cancels the run (as SIGINT does) while the trainer
// saves the checkpoint named by suffix, and fails that save with the
// cancelled context, as an HTTP client does.
type interruptingSaver struct {
	*fakePolicy
	suffix string
	cancel context.CancelFunc
	done   bool
}

func (p *interruptingSaver) Save(ctx context.Context, req trainer.SaveRequest) (trainer.SaveResponse, error) {
	if !p.done && strings.HasSuffix(req.Name, p.suffix) {
		p.done = true
		p.cancel()
		return trainer.SaveResponse{}, ctx.Err()
	}
	return p.fakePolicy.Save(ctx, req)
}

// Item 4 of issue 27: SIGINT during a scheduled checkpoint cancelled the
// save ("trainer save: context canceled") and left no checkpoint of the
// step. The interrupt now redoes the save, and the run ends interrupted.
func TestInterruptDuringCheckpointRedoesTheSave(t *testing.T) {
	_, run, pol := freshRun(t)
	defer run.Close()
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery = 4, 2
	l := newTestLoop(t, cfg, pol, run)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.deps.Policy = &interruptingSaver{fakePolicy: pol, suffix: "step-000002", cancel: cancel}
	err := l.Run(ctx, false)
	if !errors.Is(err, ErrInterrupted) {
		t.Fatalf("got %v, want ErrInterrupted", err)
	}
	if steps, _ := run.StateSteps(); len(steps) == 0 || steps[len(steps)-1] != 2 {
		t.Fatalf("checkpoints %v, want the one of step 2 saved", steps)
	}
	if v, ok := pol.saved[l.trainerCheckpointName(2)]; !ok || v != 2 {
		t.Fatalf("trainer checkpoint of step 2: %v %v", v, ok)
	}
}

// Item 7 of issue 27: a new run that fails before any trained work is
// discarded, and so are its trainer checkpoints: the loser of two runs
// sharing a trainer left run-<id>-step-000000 on the server.
func TestDiscardedRunReleasesItsTrainerCheckpoints(t *testing.T) {
	base := t.TempDir()
	pol := newFakePolicy(" paris", "")
	pol.onGRPO = func(trainer.GRPORequest) error {
		// Another run moved the shared trainer's policy under this one.
		return &trainer.Error{Code: trainer.CodeInvalidArgument, Message: "boom"}
	}
	tmp, err := rundir.Open(t.TempDir(), "tmp", rundir.New) // NewLoop wants one; Train sets its own
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	l := newTestLoop(t, testConfig(), pol, tmp)
	err = Train(context.Background(), l.cfg, l.deps, RunPlace{Base: base, Name: "r", Mode: rundir.New})
	if err == nil {
		t.Fatal("the run must fail")
	}
	if _, serr := os.Stat(filepath.Join(base, "r")); serr == nil {
		t.Fatal("the failed run's directory was kept")
	}
	if len(pol.saved) != 0 {
		t.Fatalf("the trainer still holds %v after the run was discarded", pol.saved)
	}
	if len(pol.deleted) != 1 || !strings.HasSuffix(pol.deleted[0], "-step-000000") {
		t.Fatalf("deleted %v, want the step-0 checkpoint", pol.deleted)
	}
}

// An interrupt before any trained work removes the new run's directory; the
// error must not then say "resume with --resume" (the campaign's SIGINT
// after the first metrics line found that --resume had nothing to resume).
func TestInterruptBeforeTrainedWorkSaysRunAgain(t *testing.T) {
	base := t.TempDir()
	pol := newFakePolicy(" paris", "")
	tmp, err := rundir.Open(t.TempDir(), "tmp", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	l := newTestLoop(t, testConfig(), pol, tmp)
	ctx, cancel := context.WithCancel(context.Background())
	l.deps.Fault = func(point string, step int) { cancel() }
	err = Train(ctx, l.cfg, l.deps, RunPlace{Base: base, Name: "r", Mode: rundir.New})
	if !errors.Is(err, ErrInterrupted) || strings.Contains(err.Error(), "resume with --resume") || !strings.Contains(err.Error(), "without --resume") {
		t.Fatalf("got %v, want an interrupt that says to run again without --resume", err)
	}
	if _, serr := os.Stat(filepath.Join(base, "r")); serr == nil {
		t.Fatal("the run directory was kept")
	}
}

// A run that cannot start (here: SFT epochs with no rewrite to imitate) is
// refused before its directory is opened, so --overwrite does not first
// clear the run it would have replaced.
func TestOverwriteKeepsTheOldRunWhenTheNewCannotStart(t *testing.T) {
	base := t.TempDir()
	pol := newFakePolicy(" paris", "")
	tmp, err := rundir.Open(t.TempDir(), "tmp", rundir.New) // NewLoop wants one; Train sets its own
	if err != nil {
		t.Fatal(err)
	}
	defer tmp.Close()
	l := newTestLoop(t, testConfig(), pol, tmp)
	if err := Train(context.Background(), l.cfg, l.deps, RunPlace{Base: base, Name: "r", Mode: rundir.New}); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadDir(filepath.Join(base, "r", "state"))
	if err != nil || len(before) == 0 {
		t.Fatalf("the first run saved no state: %v %v", before, err)
	}
	cfg := l.cfg
	cfg.SFT = SFTConfig{Epochs: 1, BatchSize: 2, LearningRate: 0.1}
	deps := l.deps
	deps.SFT = testTurns(2) // no rewrites
	err = Train(context.Background(), cfg, deps, RunPlace{Base: base, Name: "r", Mode: rundir.Overwrite})
	if err == nil || !strings.Contains(err.Error(), "grpo.sft.epochs 1") {
		t.Fatalf("got %v, want the refusal naming grpo.sft.epochs", err)
	}
	after, err := os.ReadDir(filepath.Join(base, "r", "state"))
	if err != nil || len(after) != len(before) {
		t.Fatalf("the old run's state went from %d files to %d (%v): --overwrite cleared it for a run that never started", len(before), len(after), err)
	}
}
