package grpo

import (
	"context"
	"errors"
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
	base := t.TempDir()
	run, err := rundir.Open(base, "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	pol := newFakePolicy(" paris", "")
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery = 4, 2
	l := newTestLoop(t, cfg, pol, run)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	l.deps.Policy = &interruptingSaver{fakePolicy: pol, suffix: "step-000002", cancel: cancel}
	err = l.Run(ctx, false)
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
