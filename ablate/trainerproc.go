package ablate

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// A transfer run on a trainer server needs a fresh policy (a run starts only
// from policy_version 0) and the checkpoints it saved for its evaluation, so
// each run gets its own server process: started before training, kept for
// the evaluation, stopped after it.

// TrainerProcess is a trainer endpoint started for one run.
type TrainerProcess struct {
	URL  string
	cmd  *exec.Cmd
	done chan error
	log  *os.File
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
// http://127.0.0.1:PORT.
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
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("trainer log: %w", err)
	}
	c := exec.Command("sh", "-c", line)
	c.Stdout, c.Stderr = lf, lf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // Stop ends the shell and what it started
	if err := c.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start trainer %q: %w", line, err)
	}
	p := &TrainerProcess{cmd: c, done: make(chan error, 1), log: lf}
	go func() { p.done <- c.Wait() }()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case err := <-p.done:
			p.done <- err
			_ = p.Stop()
			return nil, fmt.Errorf("trainer %q exited before listening (%v); see %s", line, err, logPath)
		case <-deadline.C:
			_ = p.Stop()
			return nil, fmt.Errorf("trainer %q wrote no port to %s within %s; see %s", line, portFile, timeout, logPath)
		case <-ctx.Done():
			_ = p.Stop()
			return nil, ctx.Err()
		case <-tick.C:
			raw, err := os.ReadFile(portFile)
			if err != nil || len(strings.TrimSpace(string(raw))) == 0 {
				continue
			}
			port, err := strconv.Atoi(strings.TrimSpace(string(raw)))
			if err != nil || port < 1 || port > 65535 {
				_ = p.Stop()
				return nil, fmt.Errorf("trainer port file %s: %q is not a port", portFile, raw)
			}
			p.URL = fmt.Sprintf("http://127.0.0.1:%d", port)
			slog.Info("trainer started", "url", p.URL, "pid", c.Process.Pid, "log", logPath)
			return p, nil
		}
	}
}

// Stop sends SIGTERM to the trainer's process group, waits up to 30 s, then
// kills it. Stopping a stopped process is a no-op.
func (p *TrainerProcess) Stop() error {
	if p == nil || p.cmd == nil {
		return nil
	}
	defer p.log.Close()
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	select {
	case err := <-p.done:
		p.cmd = nil
		return exitErr(err)
	case <-time.After(30 * time.Second):
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	err := <-p.done
	p.cmd = nil
	return exitErr(err)
}

// exitErr drops the error a process ended by our signal reports.
func exitErr(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return nil
		}
	}
	return err
}

// shellQuote quotes s for sh.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
