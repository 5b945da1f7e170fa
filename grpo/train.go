package grpo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/internal/tbevent"
)

// RunPlace says where a training run lives and how it starts.
type RunPlace struct {
	// Base and Name place the run directory: <Base>/<Name>.
	Base, Name string
	Mode       rundir.Mode
	// Snapshot records what produced the run (the resolved config, the
	// binary's version) in the opened directory, before training.
	Snapshot func(*rundir.RunDir) error
	// TensorBoard writes TensorBoard event files under <run>/tb/
	// (run.tensorboard).
	TensorBoard bool
	// Repair (with Mode rundir.Resume) continues past damaged run files:
	// see Loop.restore and resume_files.go.
	Repair bool
}

// Train opens the run directory, records what produced the run and trains
// (resuming from the newest checkpoint in mode rundir.Resume). A new run
// that fails before saving any trained work is removed, so that running it
// again needs no flag. deps.Run is set here, and deps.Tracker when
// place.TensorBoard.
func Train(ctx context.Context, cfg Config, deps Deps, place RunPlace) (err error) {
	log := deps.Logger
	if log == nil {
		log = slog.Default()
	}
	resume := place.Mode == rundir.Resume
	if _, err := checkDeps(cfg, deps); err != nil {
		return err
	}
	run, err := rundir.Open(place.Base, place.Name, place.Mode)
	if err != nil {
		return err
	}
	defer run.Close()
	var tr *Loop
	defer func() {
		if err != nil && run.Created() && (tr == nil || !tr.Resumable()) {
			if tr != nil {
				tr.releaseCheckpoints(ctx)
			}
			if derr := run.Discard(); derr != nil {
				log.Warn("could not remove the partial run directory", "run", run.Path, "error", derr)
			} else {
				log.Info("removed the partial run directory of the failed run", "run", run.Path)
				if errors.Is(err, ErrInterrupted) {
					// Its "resume with --resume" no longer holds: there is nothing to resume.
					err = fmt.Errorf("%w before any trained work: the partial run directory %s was removed; run the same command again (without --resume)",
						ErrInterrupted, run.Path)
				}
			}
		}
	}()
	if place.Snapshot != nil {
		if err := place.Snapshot(run); err != nil {
			return err
		}
	}
	deps.Run = run
	if place.TensorBoard {
		deps.Tracker = tbTracker{tbevent.NewRun(run.File("tb"))}
	}
	tr, err = NewLoop(cfg, deps)
	if err != nil {
		return err
	}
	tr.repair = resume && place.Repair
	log.Info("training", "run", run.Path, "steps", cfg.Steps, "prompts", len(deps.Train),
		"eval_turns", len(deps.Eval), "group_size", cfg.GroupSize, "resume", resume)
	if err := tr.Run(ctx, resume); err != nil {
		return err
	}
	// The embedded policy's weights are few and named: worth a line.
	if e, ok := deps.Policy.(interface{ NamedWeights() string }); ok {
		log.Info("embedded policy weights", "weights", e.NamedWeights())
	}
	log.Info("done", "metrics", run.File("metrics.jsonl"), "ledger", run.File("ledger"))
	return nil
}

// tbTracker adapts tbevent.Run to Tracker.
type tbTracker struct{ *tbevent.Run }

func (t tbTracker) Scalars(step int, wall time.Time, values []Scalar) error {
	s := make([]tbevent.Scalar, len(values))
	for i, v := range values {
		s[i] = tbevent.Scalar{Tag: v.Name, Value: v.Value}
	}
	return t.Run.Scalars(step, wall, s)
}

// Repaired describes the earlier sessions' events files that Begin cut
// back to their whole records (see trackerRepairs).
func (t tbTracker) Repaired() []string {
	var out []string
	for _, r := range t.Run.Repairs() {
		out = append(out, r.String())
	}
	return out
}
