package grpo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// StatusFile is the run's status.json: whether training is still going, so
// a live report knows when to stop refreshing.
const StatusFile = "status.json"

// Run states in status.json.
const (
	StateRunning     = "running"
	StateFinished    = "finished"
	StateInterrupted = "interrupted"
	StateFailed      = "failed"
)

// Status is the content of status.json, written when a session starts and
// when it ends. A process killed outright leaves "running"; Host and PID let
// a reader on the same machine tell (see Status.Alive).
type Status struct {
	State   string    `json:"state"`
	Steps   int       `json:"steps"` // configured GRPO steps
	Host    string    `json:"host"`
	PID     int       `json:"pid"`
	Started time.Time `json:"started"`
	Updated time.Time `json:"updated"`
	Error   string    `json:"error,omitempty"`
	// Warnings the session raised that a reader should see (a constant
	// reward term); absent when none.
	Warnings []string `json:"warnings,omitempty"`
	// Final is the checkpoint a finished run's final policy is
	// (grpo.load_best_at_end); absent until the run finishes.
	Final *FinalCheckpoint `json:"final,omitempty"`
}

// ReadStatus reads dir/status.json; ok is false when there is none (a run
// from before status files, or one that never started).
func ReadStatus(dir string) (st Status, ok bool, err error) {
	b, err := os.ReadFile(filepath.Join(dir, StatusFile))
	if errors.Is(err, os.ErrNotExist) {
		return st, false, nil
	}
	if err != nil {
		return st, false, fmt.Errorf("read status: %w", err)
	}
	if err := json.Unmarshal(b, &st); err != nil {
		return st, false, fmt.Errorf("%s: %w", filepath.Join(dir, StatusFile), err)
	}
	return st, true, nil
}

// writeStatus records the session's state; err is the session's outcome.
func (l *Loop) writeStatus(state string, err error) error {
	host, _ := os.Hostname()
	st := Status{State: state, Steps: l.cfg.Steps, Host: host, PID: os.Getpid(),
		Started: l.sessionStart.UTC(), Updated: l.deps.Now().UTC(), Warnings: l.warnings}
	if err == nil && state == StateFinished {
		st.Final = l.final
	}
	if err != nil {
		st.Error = err.Error()
	}
	return atomicfile.WriteJSON(l.deps.Run.File(StatusFile), st)
}

// endState names how a session ended.
func endState(err error) string {
	switch {
	case err == nil:
		return StateFinished
	case errors.Is(err, ErrInterrupted), errors.Is(err, context.Canceled):
		return StateInterrupted
	}
	return StateFailed
}
