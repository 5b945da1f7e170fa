package grpo

import (
	"context"
	"time"
)

// releaseCheckpoints deletes, where the trainer can, the trainer
// checkpoints a failed new run saved before its directory is discarded:
// nothing names them any more. Two runs that share a trainer both save a
// step-0 checkpoint; the one that loses (its policy changed under it) left
// its run-<id>-step-000000 behind on the server (item 7 of issue 27).
func (l *Loop) releaseCheckpoints(ctx context.Context) {
	if l.state.RunID == "" {
		return // never started: nothing saved
	}
	steps, err := l.deps.Run.StateSteps()
	if err != nil || len(steps) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
	defer cancel()
	for _, step := range steps {
		name := l.trainerCheckpointName(step)
		l.log.Info("releasing the trainer checkpoint of the discarded run", "name", name)
		l.deleteTrainerCheckpoint(ctx, name)
	}
}
