// Package rundir owns a run's output directory: its creation rules (never two
// runs in one directory by accident), the file layout, and the saved harness
// state with retention of the last K checkpoints.
package rundir

import (
	"encoding/json"
	"errors"
	"fmt"
	"github.com/himes-rl/himes/internal/atomicfile"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// Mode says what to do when the run directory already exists.
type Mode int

const (
	// New refuses an existing, non-empty run directory.
	New Mode = iota
	// Resume requires the run directory to exist.
	Resume
	// Overwrite deletes an existing run directory first.
	Overwrite
)

// RunDir is a run's output directory: config snapshot, version, metrics,
// ledger, and harness checkpoints.
type RunDir struct {
	Path string
}

// Open creates or reopens base/name according to mode.
func Open(base, name string, mode Mode) (*RunDir, error) {
	path := filepath.Join(base, name)
	entries, err := os.ReadDir(path)
	exists := err == nil && len(entries) > 0
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("run directory %s: %w", path, err)
	}
	switch mode {
	case New:
		if exists {
			return nil, fmt.Errorf("run directory %s already exists: pass --resume to continue it or --overwrite to replace it", path)
		}
	case Resume:
		if !exists {
			return nil, fmt.Errorf("--resume: run directory %s does not exist", path)
		}
	case Overwrite:
		if err := os.RemoveAll(path); err != nil {
			return nil, fmt.Errorf("--overwrite: remove %s: %w", path, err)
		}
	}
	for _, sub := range []string{"", "ledger", "state"} {
		if err := os.MkdirAll(filepath.Join(path, sub), 0o755); err != nil {
			return nil, fmt.Errorf("create run directory: %w", err)
		}
	}
	return &RunDir{Path: path}, nil
}

// File returns the path of a file in the run directory.
func (r *RunDir) File(name string) string { return filepath.Join(r.Path, name) }

// LedgerPath is the Parquet ledger file of one step.
func (r *RunDir) LedgerPath(step int) string {
	return filepath.Join(r.Path, "ledger", fmt.Sprintf("step-%06d.parquet", step))
}

// SamplesPath is the samples table of the evaluation at step in phase
// (init, sft or grpo: step 0 can have two evaluations).
func (r *RunDir) SamplesPath(step int, phase string) string {
	return filepath.Join(r.Path, "samples", fmt.Sprintf("step-%06d-%s.parquet", step, phase))
}

// statePath is the harness checkpoint after a step.
func (r *RunDir) statePath(step int) string {
	return filepath.Join(r.Path, "state", fmt.Sprintf("step-%06d.json", step))
}

// SaveState writes the harness state after step atomically, then keeps only
// the newest keep checkpoints (keep ≤ 0 keeps all) and returns the steps
// whose checkpoints it removed, so the caller can release what they named.
func (r *RunDir) SaveState(step int, state any, keep int) (pruned []int, err error) {
	if err := atomicfile.WriteJSON(r.statePath(step), state); err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	if keep <= 0 {
		return nil, nil
	}
	steps, err := r.StateSteps()
	if err != nil {
		return nil, err
	}
	for len(steps) > keep {
		if err := os.Remove(r.statePath(steps[0])); err != nil {
			return pruned, fmt.Errorf("retention: %w", err)
		}
		pruned = append(pruned, steps[0])
		steps = steps[1:]
	}
	return pruned, nil
}

// StateSteps lists the steps that have a saved harness state, ascending.
func (r *RunDir) StateSteps() ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(r.Path, "state"))
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var steps []int
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "step-") || !strings.HasSuffix(n, ".json") {
			continue // temporary files of an interrupted write
		}
		s, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(n, "step-"), ".json"))
		if err == nil {
			steps = append(steps, s)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// bestPath holds a copy of the harness state of the best checkpoint; its
// name does not match step-*.json, so the rotation never counts or removes it.
func (r *RunDir) bestPath() string { return filepath.Join(r.Path, "state", "best.json") }

// SaveBest writes the harness state of the best checkpoint atomically.
func (r *RunDir) SaveBest(state any) error {
	if err := atomicfile.WriteJSON(r.bestPath(), state); err != nil {
		return fmt.Errorf("save best checkpoint state: %w", err)
	}
	return nil
}

// LoadBestState decodes the best checkpoint's harness state into v; false
// when the run has none.
func (r *RunDir) LoadBestState(v any) (bool, error) {
	b, err := os.ReadFile(r.bestPath())
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read best checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return false, fmt.Errorf("best checkpoint %s is corrupt: %w", r.bestPath(), err)
	}
	return true, nil
}

// LoadLatestState decodes the newest harness state into v and returns its
// step, or -1 when there is none.
func (r *RunDir) LoadLatestState(v any) (int, error) {
	steps, err := r.StateSteps()
	if err != nil || len(steps) == 0 {
		return -1, err
	}
	step := steps[len(steps)-1]
	b, err := os.ReadFile(r.statePath(step))
	if err != nil {
		return -1, fmt.Errorf("read checkpoint: %w", err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return -1, fmt.Errorf("checkpoint %s is corrupt: %w", r.statePath(step), err)
	}
	return step, nil
}
