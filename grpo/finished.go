package grpo

import (
	"math"

	"github.com/himes-rl/himes/internal/rundir"
)

// RunProgress is how far a run on disk got, read before a resume opens it.
type RunProgress struct {
	// Step is the newest valid checkpoint's step; -1 when the run has none.
	Step int
	// Done: under the config, a resume would have nothing to do: the
	// checkpoint's step is at (or past) grpo.steps and every evaluation due
	// there is recorded.
	Done bool
}

// ReadRunProgress reads the newest valid checkpoint of the run in dir and
// says whether cfg leaves it anything to train. It changes no file, so
// `himes train --resume` can stop before the run directory is touched (no
// resume counted, no config snapshot, no empty event file). A run without
// a usable checkpoint is not done; the resume itself reports why.
func ReadRunProgress(dir string, cfg Config) (RunProgress, error) {
	st, step, err := rundir.LoadState(&rundir.RunDir{Path: dir}, math.MaxInt, validState)
	if err != nil || step < 0 {
		return RunProgress{Step: -1}, nil
	}
	return RunProgress{Step: step, Done: cfg.nothingLeft(st)}, nil
}

// nothingLeft mirrors Loop.run: from checkpoint st it would run no SFT, no
// evaluation and no step.
func (c Config) nothingLeft(st State) bool {
	evalDue := st.Step == c.Steps || (c.EvalEvery > 0 && st.Step%c.EvalEvery == 0)
	switch {
	case !st.SFTDone, st.Step < c.Steps:
		return false
	case st.Step == 0 && !st.EvalDone, st.Step > 0 && !st.EvalDone && evalDue:
		return false
	}
	return true
}
