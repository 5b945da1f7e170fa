package grpo

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

// State is the harness side of a checkpoint: enough to continue a run
// exactly. The trainer saves the policy and optimizer under TrainerCheckpoint.
type State struct {
	RunID string `json:"run_id"`
	// Generation counts resumes; it is part of every step_id (see stepID).
	Generation        int       `json:"generation"`
	Step              int       `json:"step"` // last completed step
	PolicyVersion     int64     `json:"policy_version"`
	Epoch             int       `json:"epoch"`  // data order epoch
	Cursor            int       `json:"cursor"` // position in the epoch's order
	SFTDone           bool      `json:"sft_done"`
	EvalDone          bool      `json:"eval_done"` // the evaluation at Step is in metrics.jsonl
	TrainerCheckpoint string    `json:"trainer_checkpoint"`
	SavedAt           time.Time `json:"saved_at"`
}

// restore starts a fresh state, or on resume loads the newest valid
// checkpoint and brings the trainer to exactly the policy version it
// recorded. A checkpoint that fails its checksums or field checks, or whose
// trainer checkpoint the trainer refuses, is skipped with a warning for the
// one before it; the run continues from the newest usable one.
func (l *Loop) restore(ctx context.Context, resume bool) error {
	if !resume {
		l.state = State{RunID: newRunID()}
		return nil
	}
	before := math.MaxInt
	for {
		st, step, err := rundir.LoadState(l.deps.Run, before, validState)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if step < 0 && before != math.MaxInt {
			return fmt.Errorf("resume: the trainer refused the checkpoint of every saved state (see the warnings above)")
		}
		if step < 0 {
			l.log.Warn("resume: no checkpoint yet, starting from the beginning")
			// Step ids must not collide with the lost attempts.
			l.state = State{RunID: newRunID(), Generation: max(1, l.deps.Run.Generation())}
			return nil
		}
		if st.Cursor >= len(l.deps.Train) && len(l.deps.Train) > 0 {
			return fmt.Errorf("resume: checkpoint of step %d: cursor %d is beyond the %d training turns: the training data changed",
				step, st.Cursor, len(l.deps.Train))
		}
		// The run directory counts every resume, so a process that died
		// before saving a checkpoint never shares step ids with this one.
		st.Generation = max(st.Generation+1, l.deps.Run.Generation())
		l.state = st
		err = l.alignTrainer(ctx)
		var te *trainer.Error
		if errors.As(err, &te) && checkpointRefused(te) {
			l.log.Warn("resume: the trainer refused the checkpoint, trying the one before it",
				"step", step, "trainer_checkpoint", st.TrainerCheckpoint, "error", err)
			before = step
			continue
		}
		if err != nil {
			return err
		}
		return l.deps.Run.Adopt(step)
	}
}

// alignTrainer compares the trainer's policy version with our record.
// Equal: nothing was applied after the checkpoint, continue as is.
// Different (updates applied after the checkpoint, or a trainer that
// restarted): load the trainer checkpoint, so no update is lost or applied
// twice.
func (l *Loop) alignTrainer(ctx context.Context) error {
	st := l.state
	info, err := l.deps.Policy.Info(ctx)
	if err != nil {
		return fmt.Errorf("resume: trainer info: %w", err)
	}
	if info.PolicyVersion != st.PolicyVersion {
		resp, err := l.deps.Policy.Load(ctx, trainer.LoadRequest{
			StepID: l.stepID("load-" + st.TrainerCheckpoint), Name: st.TrainerCheckpoint})
		if err != nil {
			return fmt.Errorf("resume: load trainer checkpoint %q: %w", st.TrainerCheckpoint, err)
		}
		if resp.PolicyVersion != st.PolicyVersion {
			return fmt.Errorf("resume: trainer checkpoint %q has policy version %d, the harness recorded %d",
				st.TrainerCheckpoint, resp.PolicyVersion, st.PolicyVersion)
		}
	}
	l.log.Info("resumed", "step", st.Step, "policy_version", st.PolicyVersion,
		"trainer_version_before", info.PolicyVersion, "generation", st.Generation)
	return nil
}

// checkpointRefused tells a trainer that refuses one checkpoint (missing,
// damaged, failing its checksum) from one that cannot serve at all now.
func checkpointRefused(e *trainer.Error) bool {
	switch e.Code {
	case trainer.CodeUnauthorized, trainer.CodeUnavailable, trainer.CodeOOM, trainer.CodeConflict:
		return false
	}
	return !e.Retryable
}

// validState checks a decoded checkpoint's fields (beyond its checksum: a
// state himes wrote always passes).
func validState(step int, st *State) error {
	switch {
	case st.Step != step:
		return fmt.Errorf("field step is %d, the file name says %d", st.Step, step)
	case st.RunID == "":
		return fmt.Errorf("field run_id is empty")
	case st.Generation < 0:
		return fmt.Errorf("field generation is %d, want ≥ 0", st.Generation)
	case st.PolicyVersion < 0:
		return fmt.Errorf("field policy_version is %d, want ≥ 0", st.PolicyVersion)
	case st.Epoch < 0 || st.Cursor < 0:
		return fmt.Errorf("fields epoch, cursor are %d, %d, want ≥ 0", st.Epoch, st.Cursor)
	case !st.SFTDone:
		return fmt.Errorf("field sft_done is false: every checkpoint follows the SFT phase")
	case st.TrainerCheckpoint == "":
		return fmt.Errorf("field trainer_checkpoint is empty")
	case st.SavedAt.IsZero():
		return fmt.Errorf("field saved_at is missing")
	}
	return nil
}

func newRunID() string {
	id := make([]byte, 6)
	_, _ = crand.Read(id)
	return hex.EncodeToString(id)
}

// checkpoint asks the trainer to save the policy and optimizer, then saves
// the harness state that names that trainer checkpoint (in that order: a
// harness state never points at a checkpoint that does not exist).
func (l *Loop) checkpoint(ctx context.Context) error {
	name := fmt.Sprintf("step-%06d", l.state.Step)
	resp, err := l.deps.Policy.Save(ctx, trainer.SaveRequest{StepID: l.stepID("save-" + name), Name: name})
	if err != nil {
		return fmt.Errorf("checkpoint %s: trainer save: %w", name, err)
	}
	if resp.PolicyVersion != l.state.PolicyVersion {
		return fmt.Errorf("checkpoint %s: trainer saved policy version %d, the harness expected %d",
			name, resp.PolicyVersion, l.state.PolicyVersion)
	}
	l.state.TrainerCheckpoint = name
	l.state.SavedAt = time.Now().UTC()
	if err := l.metrics.Sync(); err != nil {
		return err
	}
	pruned, err := l.deps.Run.SaveState(l.state.Step, l.state, l.cfg.KeepCheckpoints)
	if err != nil {
		return err
	}
	l.log.Debug("checkpoint saved", "step", l.state.Step, "policy_version", l.state.PolicyVersion)
	for _, step := range pruned {
		l.deleteTrainerCheckpoint(ctx, fmt.Sprintf("step-%06d", step))
	}
	return nil
}

// deleteTrainerCheckpoint releases the trainer checkpoint of a pruned
// harness state, when the endpoint supports deletion. Failing to delete only
// costs disk space, so it is logged, not fatal.
func (l *Loop) deleteTrainerCheckpoint(ctx context.Context, name string) {
	if !l.deleteChecked {
		l.deleteChecked = true
		d, ok, err := trainer.AsDeleter(ctx, l.deps.Policy)
		if !ok {
			l.log.Info("the trainer cannot delete checkpoints: its old checkpoints are kept", "error", err)
			return
		}
		l.deleter = d
	}
	if l.deleter == nil {
		return
	}
	if _, err := l.deleter.Delete(ctx, trainer.DeleteRequest{StepID: l.stepID("delete-" + name), Name: name}); err != nil {
		l.log.Warn("delete trainer checkpoint", "name", name, "error", err)
	}
}

// interrupted saves a checkpoint of the last completed step after SIGINT or
// SIGTERM, with a fresh context since the run's own is cancelled.
func (l *Loop) interrupted(ctx context.Context) error {
	save, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	info, err := l.deps.Policy.Info(save)
	switch {
	case err != nil:
		l.log.Warn("interrupted: trainer unreachable, keeping the last checkpoint", "error", err)
	case info.PolicyVersion != l.state.PolicyVersion:
		// The interrupted step's update reached the trainer but not our
		// records; the last checkpoint stays authoritative and resume rolls back.
		l.log.Warn("interrupted during an update: keeping the last checkpoint",
			"trainer_version", info.PolicyVersion, "recorded", l.state.PolicyVersion)
	default:
		if err := l.checkpoint(save); err != nil {
			l.log.Error("interrupted: checkpoint failed", "error", err)
		} else {
			l.log.Info("interrupted: checkpoint saved", "step", l.state.Step)
		}
	}
	return fmt.Errorf("interrupted after step %d (resume with --resume): %w", l.state.Step, context.Cause(ctx))
}

// epochOrder is the seeded permutation of the data for one epoch.
func epochOrder(n int, seed int64, epoch int) []int {
	return rand.New(rand.NewPCG(uint64(seed), uint64(epoch)+0x9e3779b97f4a7c15)).Perm(n)
}

// deriveSeed mixes the run seed with a step and round (SplitMix64), so every
// sampling call has its own reproducible seed.
func deriveSeed(seed int64, parts ...int64) int64 {
	x := uint64(seed)
	for _, p := range parts {
		x ^= uint64(p) + 0x9e3779b97f4a7c15 + (x << 6) + (x >> 2)
		x += 0x9e3779b97f4a7c15
		x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
		x = (x ^ (x >> 27)) * 0x94d049bb133111eb
		x ^= x >> 31
	}
	return int64(x & (1<<63 - 1))
}

// Resumable reports whether the run saved a checkpoint that holds trained
// work (an SFT phase or a GRPO step), i.e. whether --resume would skip
// anything. A new run that failed without one can be removed.
func (l *Loop) Resumable() bool {
	steps, err := l.deps.Run.StateSteps()
	if err != nil || len(steps) == 0 {
		return false
	}
	return steps[len(steps)-1] > 0 || l.state.PolicyVersion > 0
}
