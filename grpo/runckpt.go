package grpo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

// RunCheckpoint is a resolved checkpoint of a run to evaluate or export:
// the trainer checkpoint's name, the policy version the run recorded for it
// (-1: unknown) and a label for every output line that uses it ("" when
// unknown).
type RunCheckpoint struct {
	Name    string
	Version int64
	Label   string
}

// ResolveRunCheckpoint resolves `--checkpoint which` of `himes eval` and
// `himes export`. With a runDir, best and latest are the run's harness
// checkpoints, and "" is the run's final policy: the best checkpoint when
// the run made it final (grpo.load_best_at_end, status.json's final), or
// kept one without saying (runs from before it), else the latest. Without a
// runDir, latest (or "") is the trainer's newest checkpoint (Name ""). Any
// other value is a trainer checkpoint name.
func ResolveRunCheckpoint(runDir, which string) (RunCheckpoint, error) {
	if which == "" && runDir != "" {
		which = defaultRunCheckpoint(runDir)
	}
	switch {
	case which == "best" || which == "latest":
		if runDir == "" {
			if which == "best" {
				return RunCheckpoint{Version: -1}, errors.New("--checkpoint best: needs --run (the run records which checkpoint is best)")
			}
			return RunCheckpoint{Version: -1}, nil
		}
		st, err := LoadCheckpointState(&rundir.RunDir{Path: runDir}, which)
		if err != nil {
			return RunCheckpoint{Version: -1}, fmt.Errorf("--checkpoint %s: %w", which, err)
		}
		c := RunCheckpoint{Name: st.TrainerCheckpoint, Version: st.PolicyVersion, Label: checkpointLabel(which, st)}
		slog.Info("run checkpoint", "which", which, "step", st.Step, "checkpoint", c.Label, "trainer_checkpoint", st.TrainerCheckpoint)
		return c, nil
	}
	return RunCheckpoint{Name: which, Version: -1, Label: "trainer checkpoint " + which}, nil
}

// checkpointLabel names a run checkpoint: which, its step, and for the best
// its metric's value.
func checkpointLabel(which string, st State) string {
	if which == "best" && st.Best != nil {
		return fmt.Sprintf("best: step %d, %s %.4f", st.Best.Step, st.Best.Metric, st.Best.Value)
	}
	return fmt.Sprintf("%s: step %d", which, st.Step)
}

// defaultRunCheckpoint is the run's final policy: what status.json's final
// says, else best when the run kept one, else latest.
func defaultRunCheckpoint(runDir string) string {
	if st, ok, err := ReadStatus(runDir); err == nil && ok && st.Final != nil {
		return st.Final.Which
	}
	var best State
	if ok, err := (&rundir.RunDir{Path: runDir}).LoadBestState(&best); err == nil && ok {
		return "best"
	}
	return "latest"
}

// LoadPolicyCheckpoint restores the named policy checkpoint into pol, or
// the newest when name is "". A known wantVersion (≥ 0) must be the
// restored one: a trainer holding another run's checkpoint of the same name
// must not be evaluated silently.
func LoadPolicyCheckpoint(ctx context.Context, pol trainer.Policy, name string, wantVersion int64) error {
	cks, err := pol.Checkpoints(ctx)
	if err != nil {
		return fmt.Errorf("policy checkpoints: %w", err)
	}
	if len(cks) == 0 {
		return errors.New("--run: the trainer has no policy checkpoint to load")
	}
	pick := -1
	for i, c := range cks {
		if name != "" {
			if c.Name == name {
				pick = i
			}
			continue
		}
		if pick < 0 || c.PolicyVersion > cks[pick].PolicyVersion ||
			(c.PolicyVersion == cks[pick].PolicyVersion && c.CreatedAt.After(cks[pick].CreatedAt)) {
			pick = i
		}
	}
	if pick < 0 {
		return fmt.Errorf("--checkpoint: trainer checkpoint %q is not among the trainer's checkpoints", name)
	}
	// A fresh step id: a repeated one would be answered from the endpoint's
	// replay log without loading anything.
	stepID := fmt.Sprintf("eval-load/%s/%d", cks[pick].Name, time.Now().UnixNano())
	resp, err := pol.Load(ctx, trainer.LoadRequest{StepID: stepID, Name: cks[pick].Name})
	if err != nil {
		return fmt.Errorf("load checkpoint %s: %w", cks[pick].Name, err)
	}
	if wantVersion >= 0 && resp.PolicyVersion != wantVersion {
		return fmt.Errorf("load checkpoint %s: policy version %d, the run recorded %d (is the trainer's checkpoint directory another run's?)",
			resp.Name, resp.PolicyVersion, wantVersion)
	}
	slog.Info("policy checkpoint loaded", "name", resp.Name, "policy_version", resp.PolicyVersion)
	return nil
}
