package grpo

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"slices"
	"time"

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
	// Best is the best checkpoint so far (grpo.best_metric); nil before the
	// first evaluation or without a best metric.
	Best *BestCheckpoint `json:"best,omitempty"`
}

// restore starts a fresh state, or on resume loads the newest checkpoint and
// brings the trainer to exactly the policy version it recorded.
func (l *Loop) restore(ctx context.Context, resume bool) error {
	var st State
	step := -1
	if resume {
		var err error
		if step, err = l.deps.Run.LoadLatestState(&st); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
	}
	if step < 0 {
		if resume {
			l.log.Warn("resume: no checkpoint yet, starting from the beginning")
		}
		id := make([]byte, 6)
		_, _ = crand.Read(id)
		l.state = State{RunID: hex.EncodeToString(id)}
		if resume {
			l.state.Generation = 1 // step ids must not collide with the lost first attempt
		}
		return nil
	}
	st.Generation++
	l.state = st

	// Compare the trainer's policy version with our record. Equal: nothing
	// was applied after the checkpoint, continue as is. Different (updates
	// applied after the checkpoint, or a trainer that restarted): load the
	// trainer checkpoint, so no update is lost or applied twice.
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

// checkpoint asks the trainer to save the policy and optimizer, then saves
// the harness state that names that trainer checkpoint (in that order: a
// harness state never points at a checkpoint that does not exist). A non-nil
// best makes it the best checkpoint: state/best.json is written before the
// step's state, and its trainer checkpoint survives the rotation.
func (l *Loop) checkpoint(ctx context.Context, best *BestCheckpoint) error {
	name := fmt.Sprintf("step-%06d", l.state.Step)
	// Already saved at this step (the step-0 checkpoint before its
	// evaluation): the policy has not changed since.
	if l.state.TrainerCheckpoint != name {
		resp, err := l.deps.Policy.Save(ctx, trainer.SaveRequest{StepID: l.stepID("save-" + name), Name: name})
		if err != nil {
			return fmt.Errorf("checkpoint %s: trainer save: %w", name, err)
		}
		if resp.PolicyVersion != l.state.PolicyVersion {
			return fmt.Errorf("checkpoint %s: trainer saved policy version %d, the harness expected %d",
				name, resp.PolicyVersion, l.state.PolicyVersion)
		}
		l.state.TrainerCheckpoint = name
	}
	l.state.SavedAt = time.Now().UTC()
	if err := l.metrics.Sync(); err != nil {
		return err
	}
	prev := l.state.Best
	if best != nil {
		best.TrainerCheckpoint = name
		l.state.Best = best
		if err := l.deps.Run.SaveBest(l.state); err != nil {
			return err
		}
		l.log.Info("best checkpoint", "step", best.Step, "metric", best.Metric, "value", round4(best.Value))
	}
	pruned, err := l.deps.Run.SaveState(l.state.Step, l.state, l.cfg.KeepCheckpoints)
	if err != nil {
		return err
	}
	l.log.Debug("checkpoint saved", "step", l.state.Step, "policy_version", l.state.PolicyVersion)
	gone := map[int]bool{}
	for _, step := range pruned {
		gone[step] = true
		if l.state.Best == nil || step != l.state.Best.Step {
			l.deleteTrainerCheckpoint(ctx, fmt.Sprintf("step-%06d", step))
		}
	}
	// A superseded best whose harness state the rotation already removed
	// (in an earlier call) is released now.
	if best != nil && prev != nil && prev.Step != best.Step && !gone[prev.Step] && l.cfg.KeepCheckpoints > 0 {
		kept, err := l.deps.Run.StateSteps()
		if err != nil {
			return err
		}
		if !slices.Contains(kept, prev.Step) {
			l.deleteTrainerCheckpoint(ctx, prev.TrainerCheckpoint)
		}
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
		if err := l.checkpoint(save, nil); err != nil {
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
