package ablate

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/himes-rl/himes/internal/launch"
)

// A transfer run on a trainer server needs a fresh policy (a run starts only
// from policy_version 0) and the checkpoints it saved for its evaluation, so
// each run gets its own server process: started before training, kept for
// the evaluation, stopped after it.

// TrainerProcess is a trainer endpoint started for one run.
type TrainerProcess struct {
	URL  string
	proc *launch.Process
}

// Trainer command placeholders, replaced by shell-quoted paths.
const (
	PortFilePlaceholder      = "{port_file}"
	CheckpointDirPlaceholder = "{checkpoint_dir}"
)

// StartTrainer runs command with sh -c, {port_file} and {checkpoint_dir}
// replaced by files under dir, its output appended to logPath, and waits
// (at most timeout) until it writes its port to the port file, as the
// reference trainer's --port-file does. The endpoint is
// http://127.0.0.1:PORT. internal/launch runs it (its own process group,
// stopped whole; the error of a failed start quotes the log's last lines).
func StartTrainer(ctx context.Context, command, dir, logPath string, timeout time.Duration) (*TrainerProcess, error) {
	if !strings.Contains(command, PortFilePlaceholder) {
		return nil, fmt.Errorf("trainer command: it must contain %s (where the server writes its port), e.g. --port 0 --port-file %s",
			PortFilePlaceholder, PortFilePlaceholder)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("trainer command: %w", err)
	}
	portFile := filepath.Join(dir, "port")
	_ = os.Remove(portFile) // a port from an earlier process is not this one's
	ckDir := filepath.Join(dir, "checkpoints")
	line := strings.NewReplacer(PortFilePlaceholder, shellQuote(portFile), CheckpointDirPlaceholder, shellQuote(ckDir)).Replace(command)
	p, err := launch.Start(ctx, launch.Spec{
		Name: "trainer", Argv: []string{"sh", "-c", line}, Log: logPath,
		Ready: launch.PortFile(portFile), ReadyTimeout: timeout, PollInterval: 200 * time.Millisecond,
	})
	if err != nil {
		return nil, err
	}
	return &TrainerProcess{URL: p.URL(), proc: p}, nil
}

// Stop sends SIGTERM to the trainer's process group, waits up to 30 s, then
// kills it; it reports a trainer that had exited on its own with an error.
// Stopping a stopped process is a no-op.
func (p *TrainerProcess) Stop() error {
	if p == nil || p.proc == nil {
		return nil
	}
	return p.proc.Stop()
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
