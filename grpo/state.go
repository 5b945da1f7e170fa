package grpo

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/himes-rl/himes/trainer"
)

// State is the harness side of a checkpoint: enough to continue a run
// exactly. The trainer saves the policy and optimizer under TrainerCheckpoint.
type State struct {
	RunID string `json:"run_id"`
	// Generation counts resumes; it is part of every step_id (see stepID).
	Generation    int   `json:"generation"`
	Step          int   `json:"step"` // last completed step
	PolicyVersion int64 `json:"policy_version"`
	Epoch         int   `json:"epoch"`  // data order epoch
	Cursor        int   `json:"cursor"` // position in the epoch's order
	SFTDone       bool  `json:"sft_done"`
	// OptimizerReset: the GRPO step that reset the trainer's optimizer
	// after SFT (grpo.optimizer.reset) is applied; a resume past it does not
	// reset again.
	OptimizerReset    bool      `json:"optimizer_reset,omitempty"`
	EvalDone          bool      `json:"eval_done"` // the evaluation at Step is in metrics.jsonl
	TrainerCheckpoint string    `json:"trainer_checkpoint"`
	SavedAt           time.Time `json:"saved_at"`
	// ElapsedSeconds is the training time up to this checkpoint, over all
	// sessions (metrics' elapsed_s continues from it on resume).
	ElapsedSeconds float64 `json:"elapsed_s"`
	// Best is the best checkpoint so far (grpo.best_metric); nil before the
	// first evaluation or without a best metric.
	Best *BestCheckpoint `json:"best,omitempty"`
	// LRScale multiplies the scheduled learning rate after collapse
	// rollbacks (grpo.on_collapse: rollback); absent (0) means 1.
	LRScale float64 `json:"lr_scale,omitempty"`
	// Rewrote: an evaluation saw the greedy policy rewrite (its adds-nothing
	// share under grpo.collapse.adds_nothing); only then is adding nothing
	// a collapse (collapse.go).
	Rewrote bool `json:"rewrote,omitempty"`
	// Metrics is the part of metrics.jsonl this checkpoint covers (nil in
	// checkpoints of an older himes).
	Metrics *MetricsCoverage `json:"metrics,omitempty"`
}

// restore starts a fresh state, or on resume loads the newest valid
// checkpoint and brings the trainer to exactly the policy it recorded. The
// trainer's own state is never trusted: a run starts only from a fresh
// policy (version 0) or from its own checkpoint, loaded and verified. A
// checkpoint that fails its checksums or field checks, or whose trainer
// checkpoint the trainer refuses, is skipped with a warning for the one
// before it; the run continues from the newest usable one.
func (l *Loop) restore(ctx context.Context, resume bool) error {
	info, err := l.deps.Policy.Info(ctx)
	if err != nil {
		return fmt.Errorf("trainer info: %w", err)
	}
	// One info call at the start: limits, capabilities, and the version the
	// fresh-policy check below needs.
	if err := l.checkLimits(info.Limits); err != nil {
		return err
	}
	if err := l.checkWeightDecay(info); err != nil {
		return err
	}
	if err := l.checkOptimizerReset(info); err != nil {
		return err
	}
	l.caps = info.Capabilities
	if !resume {
		return l.freshState(info, false, 0)
	}
	before := math.MaxInt
	var refused error // the trainer's last refusal
	var rep repairReport
	for {
		st, step, damaged, err := l.loadState(before)
		if err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		if step < 0 && rep.fallback != nil {
			// --repair: no checkpoint's metrics log is intact; continue
			// from the newest one with the damaged log set aside.
			st, step, damaged = rep.fallback.st, rep.fallback.step, rep.fallback.damaged
			rep.fallback = nil
			if err := rep.setAsideMetrics(l, &st); err != nil {
				return err
			}
		} else if step < 0 && before != math.MaxInt {
			if refused == nil {
				return fmt.Errorf("resume --repair: no checkpoint is usable (%s)", strings.Join(rep.skipped, "; "))
			}
			return fmt.Errorf("the trainer refused the checkpoint of every saved state (the oldest: %w)", refused)
		}
		if step < 0 {
			l.log.Warn("resume: no checkpoint yet, starting from the beginning")
			// Step ids must not collide with the lost attempts.
			if err := l.freshState(info, true, max(1, l.deps.Run.Generation())); err != nil {
				return err
			}
			// The lost attempts' ledgers are set aside: this run writes its own.
			return l.deps.Run.Adopt(0)
		}
		if st.Cursor >= len(l.deps.Train) && len(l.deps.Train) > 0 {
			return fmt.Errorf("resume: checkpoint of step %d: cursor %d is beyond the %d training turns: the training data changed",
				step, st.Cursor, len(l.deps.Train))
		}
		// The checkpoint covers the head of metrics.jsonl: verified before
		// anything is changed (resume_files.go).
		if st.Metrics != nil {
			if _, err := coveredMetrics(l.deps.Run.File("metrics.jsonl"), step, st.Metrics); err != nil {
				if !l.repair {
					return fmt.Errorf("resume: %w", err)
				}
				rep.skip(step, err, st, damaged)
				before = step
				continue
			}
		}
		if err := l.checkBestFile(&st, &rep); err != nil {
			return fmt.Errorf("resume: %w", err)
		}
		// The run directory counts every resume, so a process that died
		// before saving a checkpoint never shares step ids with this one.
		st.Generation = max(st.Generation+1, l.deps.Run.Generation())
		l.state = st
		err = l.loadTrainerCheckpoint(ctx, info)
		var te *trainer.Error
		if errors.As(err, &te) && checkpointRefused(te) {
			l.log.Warn("resume: the trainer refused the checkpoint, trying the one before it",
				"step", step, "trainer_checkpoint", st.TrainerCheckpoint, "error", err)
			before, refused = step, err
			continue
		}
		if err != nil {
			return err
		}
		if err := l.deps.Run.SetAsideDamagedLedgers(damaged); err != nil {
			return err
		}
		rep.damaged = damaged
		if err := rep.write(l, step); err != nil {
			return err
		}
		return l.deps.Run.Adopt(step)
	}
}

// freshState starts the run from scratch. A trained policy on the trainer
// belongs to another run, or to this run's first attempt killed before its
// first checkpoint (during SFT): training on it would silently start from
// the wrong policy.
func (l *Loop) freshState(info trainer.Info, resume bool, generation int) error {
	if info.PolicyVersion != 0 {
		what := "a fresh run"
		if resume {
			what = "resume: the run has no checkpoint yet, so it starts over, and"
		}
		return fmt.Errorf("%s needs a fresh policy (policy_version 0), but the trainer's policy is at version %d: "+
			"it was trained by another run or by this run's interrupted first attempt; restart the trainer (or point "+
			"trainer.endpoint at a fresh one) and run again", what, info.PolicyVersion)
	}
	l.state = State{RunID: newRunID(), Generation: generation}
	return nil
}

// loadTrainerCheckpoint loads the checkpoint the state names into the
// trainer, always, even when the trainer reports the recorded version: an
// equal version does not make it this run's policy (another run may share
// the trainer), and updates applied after the checkpoint must be rolled back
// so none is lost or applied twice.
func (l *Loop) loadTrainerCheckpoint(ctx context.Context, info trainer.Info) error {
	st := l.state
	resp, err := l.deps.Policy.Load(ctx, trainer.LoadRequest{
		StepID: l.stepID("load-" + st.TrainerCheckpoint), Name: st.TrainerCheckpoint, ExpectedRunID: st.RunID})
	if err != nil {
		return fmt.Errorf("resume: load trainer checkpoint %q: %w", st.TrainerCheckpoint, err)
	}
	switch {
	case resp.PolicyVersion != st.PolicyVersion:
		return fmt.Errorf("resume: trainer checkpoint %q has policy version %d, the harness recorded %d",
			st.TrainerCheckpoint, resp.PolicyVersion, st.PolicyVersion)
	case resp.RunID != "" && resp.RunID != st.RunID:
		// An endpoint that ignored expected_run_id has now loaded another
		// run's weights: stop before training on them.
		return fmt.Errorf("resume: trainer checkpoint %q belongs to run %q, not this run (%q): the trainer now holds another run's policy",
			st.TrainerCheckpoint, resp.RunID, st.RunID)
	case resp.RunID == "":
		l.log.Warn("resume: the trainer does not report the run id of its checkpoints; cannot verify that it is this run's",
			"checkpoint", st.TrainerCheckpoint)
	}
	l.log.Info("resumed", "step", st.Step, "policy_version", st.PolicyVersion,
		"trainer_version_before", info.PolicyVersion, "generation", st.Generation)
	return nil
}

// checkpointRefused tells a trainer that refuses one checkpoint (missing,
// damaged, failing its checksum, another run's) from one that cannot serve
// at all now.
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

// checkLimits refuses a config whose requests the trainer would refuse
// (info.limits; 0 = no limit), before anything is trained. Evaluations are
// split into calls of at most max_prompts prompts instead.
func (l *Loop) checkLimits(lim trainer.Limits) error {
	over := func(limit, v int) bool { return limit > 0 && v > limit }
	switch {
	case over(lim.MaxPrompts, l.cfg.PromptsPerStep):
		return fmt.Errorf("grpo.prompts_per_step %d exceeds the trainer's info.limits.max_prompts %d", l.cfg.PromptsPerStep, lim.MaxPrompts)
	case over(lim.MaxN, l.cfg.GroupSize):
		return fmt.Errorf("grpo.group_size %d exceeds the trainer's info.limits.max_n %d", l.cfg.GroupSize, lim.MaxN)
	case over(lim.MaxTokens, l.cfg.MaxTokens):
		return fmt.Errorf("grpo.max_tokens %d exceeds the trainer's info.limits.max_tokens %d", l.cfg.MaxTokens, lim.MaxTokens)
	case over(lim.MaxBatch, l.cfg.PromptsPerStep*l.cfg.GroupSize):
		return fmt.Errorf("a grpo_step of grpo.prompts_per_step × group_size = %d samples exceeds the trainer's info.limits.max_batch %d",
			l.cfg.PromptsPerStep*l.cfg.GroupSize, lim.MaxBatch)
	case l.cfg.SFT.Epochs > 0 && over(lim.MaxBatch, l.cfg.SFT.BatchSize):
		return fmt.Errorf("grpo.sft.batch_size %d exceeds the trainer's info.limits.max_batch %d", l.cfg.SFT.BatchSize, lim.MaxBatch)
	}
	l.limits = lim
	return nil
}

// trainerCheckpointName names the trainer checkpoint of a step. The run id
// makes it the run's own: one trainer (or checkpoint directory) may serve
// several runs, whose step numbers coincide.
func (l *Loop) trainerCheckpointName(step int) string {
	return fmt.Sprintf("run-%s-step-%06d", l.state.RunID, step)
}

// policyChangedError says that the trainer's policy is not the one this run
// trained: the trainer restarted, or another client updated or loaded it.
type policyChangedError struct{ msg string }

func (e *policyChangedError) Error() string { return e.msg }

// policyChanged reports a response whose policy_version is not the one the
// run expects (endpoints that ignore expected_policy_version are caught here).
func policyChanged(call string, got, want int64) error {
	return &policyChangedError{fmt.Sprintf("%s: the trainer answered policy_version %d, the run expected %d: "+
		"the trainer restarted or another client changed its policy", call, got, want)}
}

// isPolicyChanged says whether err means the trainer's policy is not the run's.
func isPolicyChanged(err error) bool {
	var pc *policyChangedError
	return errors.As(err, &pc) || trainer.ErrorCode(err) == trainer.CodeVersionMismatch
}

// expected is the run's policy version, as the precondition of a trainer call.
func (l *Loop) expected() *int64 { return trainer.Version(l.state.PolicyVersion) }

// checkpoint asks the trainer to save the policy and optimizer, then saves
// the harness state that names that trainer checkpoint (in that order: a
// harness state never points at a checkpoint that does not exist). A non-nil
// best makes it the best checkpoint: state/best.json is written before the
// step's state, and its trainer checkpoint survives the rotation.
func (l *Loop) checkpoint(ctx context.Context, best *BestCheckpoint) error {
	name := l.trainerCheckpointName(l.state.Step)
	// Already saved at this step (the step-0 checkpoint before its
	// evaluation): the policy has not changed since.
	if l.state.TrainerCheckpoint != name {
		resp, err := l.deps.Policy.Save(ctx, trainer.SaveRequest{StepID: l.stepID("save-" + name), Name: name,
			RunID: l.state.RunID, ExpectedPolicyVersion: l.expected()})
		if err != nil {
			return fmt.Errorf("checkpoint %s: trainer save: %w", name, err)
		}
		if resp.PolicyVersion != l.state.PolicyVersion {
			return policyChanged("checkpoint "+name+": trainer save", resp.PolicyVersion, l.state.PolicyVersion)
		}
		l.state.TrainerCheckpoint = name
	}
	l.state.SavedAt = time.Now().UTC()
	l.state.ElapsedSeconds = l.elapsedAt(l.deps.Now())
	if err := l.metrics.Sync(); err != nil {
		return err
	}
	l.state.Metrics = l.metrics.coverage()
	if t := l.deps.Tracker; t != nil {
		if err := t.Flush(); err != nil {
			return fmt.Errorf("tracker: %w", err)
		}
	}
	// The checkpoint covers whole ledger files: write the open chunk.
	if err := l.flushLedger(); err != nil {
		return err
	}
	prev := l.state.Best
	if best != nil {
		best.TrainerCheckpoint = name
		best.PolicyVersion = l.state.PolicyVersion
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
		// Only this run's names: a checkpoint of a run that predates per-run
		// names ("step-NNNNNN") may as well be another run's, and is kept.
		if l.state.Best == nil || step != l.state.Best.Step {
			l.deleteTrainerCheckpoint(ctx, l.trainerCheckpointName(step))
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

// ErrInterrupted is returned by Run when SIGINT/SIGTERM stopped it.
var ErrInterrupted = errors.New("interrupted")

// interrupted saves a checkpoint of the last completed step after SIGINT or
// SIGTERM, with a fresh context since the run's own is cancelled.
func (l *Loop) interrupted(ctx context.Context) error { return l.interruptedSave(ctx, nil) }

// interruptedSave is interrupted for a checkpoint that may be the best.
func (l *Loop) interruptedSave(ctx context.Context, best *BestCheckpoint) error {
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
		if err := l.checkpoint(save, best); err != nil {
			l.log.Error("interrupted: checkpoint failed", "error", err)
		} else {
			l.log.Info("interrupted: checkpoint saved", "step", l.state.Step)
		}
	}
	return fmt.Errorf("%w after step %d (resume with --resume): %w", ErrInterrupted, l.state.Step, context.Cause(ctx))
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
