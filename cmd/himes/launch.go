package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/internal/launch"
	"github.com/himes-rl/himes/trainer"
)

// trainerLogName is the launched trainer's log in the run directory.
const trainerLogName = "trainer.log"

// launchedTrainer is the reference trainer a command started for
// trainer.endpoint "launch" (nil when the endpoint is anything else; its
// methods are then no-ops).
type launchedTrainer struct {
	proc    *launch.Process
	portDir string
	// log is where the trainer writes; moveTo, when set, is where finish
	// appends it once the run directory exists (himes train starts the
	// trainer before it creates the run directory).
	log, moveTo string
}

// startLaunchedTrainer starts `PYTHON -m lora_trainer ARGS --host 127.0.0.1
// --port 0 --port-file F --checkpoint-dir <runDir>/trainer` when
// trainer.endpoint is "launch", its output appended to logPath, and waits
// until it listens. The checkpoint directory is the run's, as for the
// embedded policy, so a resumed run's new trainer loads what the last one
// saved; the trainer creates it at its first save, after the run directory
// exists.
func startLaunchedTrainer(ctx context.Context, cfg configs.Config, runDir, logPath string) (*launchedTrainer, error) {
	if cfg.Trainer.Endpoint != trainer.LaunchEndpoint {
		return nil, nil
	}
	lc := cfg.Trainer.Launch
	py := lc.Python
	if py == "" {
		var err error
		if py, err = pythonEnv(); err != nil {
			return nil, fmt.Errorf("trainer.launch.python: unset, and no reference trainer's environment to take it from (%w): set it", err)
		}
	}
	portDir, err := os.MkdirTemp("", "himes-trainer-port-")
	if err != nil {
		return nil, fmt.Errorf("trainer.launch: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(logPath), 0o755); err != nil {
		os.RemoveAll(portDir)
		return nil, fmt.Errorf("trainer.launch: log directory: %w", err)
	}
	portFile := filepath.Join(portDir, "port")
	ckDir, err := filepath.Abs(filepath.Join(runDir, "trainer"))
	if err != nil {
		os.RemoveAll(portDir)
		return nil, err
	}
	argv := lc.Argv(py, "--host", "127.0.0.1", "--port", "0", "--port-file", portFile, "--checkpoint-dir", ckDir)
	p, err := launch.Start(ctx, launch.Spec{
		Name: "trainer", Argv: argv, Env: lc.Env, Log: logPath, Ready: launch.PortFile(portFile),
		ReadyTimeout: seconds(lc.ReadyTimeoutSeconds), StopTimeout: seconds(lc.StopTimeoutSeconds),
	})
	if err != nil {
		os.RemoveAll(portDir)
		return nil, err
	}
	return &launchedTrainer{proc: p, portDir: portDir, log: logPath}, nil
}

// config returns cfg with trainer.endpoint set to the launched trainer's
// URL, for the components; the run's recorded config keeps "launch" (the
// port changes from one start to the next).
func (t *launchedTrainer) config(cfg configs.Config) configs.Config {
	if t != nil {
		cfg.Trainer.Endpoint = t.proc.URL()
	}
	return cfg
}

// watch returns a context that ends, with the trainer's exit and log as its
// cause, if the trainer dies while the command runs.
func (t *launchedTrainer) watch(ctx context.Context) context.Context {
	if t == nil {
		return ctx
	}
	return watchService(ctx, t.proc)
}

// finish stops the trainer and moves its log into place. A trainer that
// died during the command makes the command fail with its exit and its
// log's last lines, whatever the command's own error was (a call to a dead
// trainer fails with a less useful one).
func (t *launchedTrainer) finish(err error) error {
	if t == nil {
		return err
	}
	defer os.RemoveAll(t.portDir)
	return finishService(t.proc, "trainer", t.log, t.moveTo, err)
}

// watchService returns a context that ends, with the service's exit and log
// as its cause, if the service dies while the command runs.
func watchService(ctx context.Context, p *launch.Process) context.Context {
	ctx, cancel := context.WithCancelCause(ctx)
	p.Watch(cancel)
	return ctx
}

// finishService stops a launched service (what names it) and appends its
// log (at log) to moveTo when moveTo is set and its directory exists. A
// service that died during the command makes the command fail with its
// exit and its log's last lines, whatever the command's own error was.
func finishService(p *launch.Process, what, log, moveTo string, err error) error {
	serr := p.Stop()
	if serr != nil && !errors.Is(err, serr) { // the command's error may already carry the crash (the context's cause)
		if err != nil {
			err = fmt.Errorf("%w (the command then failed: %v)", serr, err)
		} else {
			err = serr
		}
	}
	if moveTo == "" {
		return err
	}
	if _, statErr := os.Stat(filepath.Dir(moveTo)); statErr != nil {
		// No run directory (it could not start, or a failed new run was
		// removed): the log stays where it is, and the error says where.
		if err != nil {
			err = fmt.Errorf("%w (%s log: %s)", err, what, log)
		}
		return err
	}
	if merr := appendFile(moveTo, log); merr != nil {
		return errors.Join(err, fmt.Errorf("%s log: %w", what, merr))
	}
	if err != nil {
		err = fmt.Errorf("%w (%s log, whole: %s)", err, what, moveTo)
	}
	return err
}

// appendFile appends src to dst and removes src.
func appendFile(dst, src string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	if err := out.Close(); err != nil {
		return err
	}
	return os.Remove(src)
}

// pythonEnv runs scripts/ci/python-env.sh of the himes clone that holds the
// working directory (found from it upward) with args and returns the
// interpreter it prints.
func pythonEnv(args ...string) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	const script = "scripts/ci/python-env.sh"
	for dir := wd; ; dir = filepath.Dir(dir) {
		path := filepath.Join(dir, script)
		if _, err := os.Stat(path); err == nil {
			var stdout, stderr bytes.Buffer
			c := exec.Command("bash", append([]string{path}, args...)...)
			c.Stdout, c.Stderr = &stdout, &stderr
			launch.DieWithParent(c)
			if err := c.Run(); err != nil {
				return "", fmt.Errorf("%s: %v: %s", path, err, strings.TrimSpace(stderr.String()))
			}
			return strings.TrimSpace(stdout.String()), nil
		}
		if filepath.Dir(dir) == dir {
			return "", fmt.Errorf("no %s in %s or above it (run himes from its clone)", script, wd)
		}
	}
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
