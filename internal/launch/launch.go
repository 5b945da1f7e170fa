// Package launch runs a service that a command needs (a trainer endpoint, an
// Ollama server) as a child process for the command's lifetime: start it
// with its output in a log file, wait until it is ready, watch it, and stop
// it (its whole process group) at the end, on error and on interrupt.
//
// The child gets its own process group, so a Ctrl-C at the terminal reaches
// only himes, which then stops the child after saving its own state; and
// Pdeathsig, so that the child dies with himes even when himes is killed
// with SIGKILL and no deferred Stop runs.
package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Spec describes one child process.
type Spec struct {
	// Name names the service in messages ("trainer", "ollama").
	Name string
	// Argv is the program and its arguments (no shell).
	Argv []string
	// Env is added to himes's own environment.
	Env []string
	// Dir is the working directory ("" = himes's).
	Dir string
	// Log is the file the child's stdout and stderr are appended to.
	Log string
	// Ready reports the service's URL once it is ready (ok), is polled
	// every PollInterval until then; an error stops the wait.
	Ready ReadyFunc
	// ReadyTimeout bounds the wait for Ready (default 10 minutes).
	ReadyTimeout time.Duration
	// StopTimeout is how long Stop waits after SIGTERM before SIGKILL
	// (default 30 s).
	StopTimeout time.Duration
	// PollInterval is the Ready polling period (default 100 ms).
	PollInterval time.Duration
}

// ReadyFunc reports whether the service is ready and its URL.
type ReadyFunc func(ctx context.Context) (url string, ok bool, err error)

// PortFile is ready when path holds a port number (as the reference
// trainer's --port 0 --port-file writes it, atomically); the URL is
// http://127.0.0.1:PORT. A file that does not hold a port is an error.
func PortFile(path string) ReadyFunc {
	return func(context.Context) (string, bool, error) {
		raw, err := os.ReadFile(path)
		if errors.Is(err, os.ErrNotExist) || (err == nil && len(bytes.TrimSpace(raw)) == 0) {
			return "", false, nil
		}
		if err != nil {
			return "", false, err
		}
		port, err := strconv.Atoi(string(bytes.TrimSpace(raw)))
		if err != nil || port < 1 || port > 65535 {
			return "", false, fmt.Errorf("port file %s: %q is not a port", path, raw)
		}
		return "http://127.0.0.1:" + strconv.Itoa(port), true, nil
	}
}

// HTTPGet is ready when a GET of base+path answers 2xx; the URL is base.
// Connection errors mean "not yet".
func HTTPGet(base, path string) ReadyFunc {
	client := &http.Client{Timeout: 2 * time.Second}
	return func(ctx context.Context) (string, bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		if err != nil {
			return "", false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return "", false, nil
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return base, resp.StatusCode/100 == 2, nil
	}
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, for
// a server that cannot pick its own and report it (Ollama's OLLAMA_HOST).
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Process is a started, ready service.
type Process struct {
	spec Spec
	url  string
	cmd  *exec.Cmd
	log  *os.File

	exited  chan struct{} // closed when the child has exited
	waitErr error         // its exit status, set before exited is closed

	crashOnce sync.Once
	crash     error

	mu       sync.Mutex
	stopping bool // Stop was called: the exit is ours, not a crash
	stopErr  error
	stopped  bool
}

// Start starts the child and waits until it is ready, it exits, the ready
// timeout passes or ctx ends; in the last three cases the child is stopped
// and the error names the command and quotes the log's last lines.
func Start(ctx context.Context, s Spec) (*Process, error) {
	if len(s.Argv) == 0 {
		return nil, fmt.Errorf("launch %s: no command", s.Name)
	}
	if s.Ready == nil {
		return nil, fmt.Errorf("launch %s: no readiness check", s.Name)
	}
	if s.ReadyTimeout <= 0 {
		s.ReadyTimeout = 10 * time.Minute
	}
	if s.StopTimeout <= 0 {
		s.StopTimeout = 30 * time.Second
	}
	if s.PollInterval <= 0 {
		s.PollInterval = 100 * time.Millisecond
	}
	lf, err := os.OpenFile(s.Log, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("launch %s: log: %w", s.Name, err)
	}
	c := exec.Command(s.Argv[0], s.Argv[1:]...)
	c.Dir = s.Dir
	c.Env = append(os.Environ(), s.Env...)
	c.Stdout, c.Stderr = lf, lf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	DieWithParent(c)
	if err := c.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("launch %s: start %s: %w", s.Name, commandLine(s.Argv), err)
	}
	p := &Process{spec: s, cmd: c, log: lf, exited: make(chan struct{})}
	go func() {
		p.waitErr = c.Wait()
		close(p.exited)
	}()
	slog.Info("launched", "service", s.Name, "pid", c.Process.Pid, "command", commandLine(s.Argv), "log", s.Log)

	fail := func(format string, args ...any) (*Process, error) {
		_ = p.Stop()
		return nil, fmt.Errorf("launch %s: %s %s; %s", s.Name, commandLine(s.Argv), fmt.Sprintf(format, args...), p.tail())
	}
	deadline := time.NewTimer(s.ReadyTimeout)
	defer deadline.Stop()
	tick := time.NewTicker(s.PollInterval)
	defer tick.Stop()
	for {
		url, ok, err := s.Ready(ctx)
		if err != nil {
			return fail("is not ready: %v", err)
		}
		if ok {
			p.url = url
			slog.Info("ready", "service", s.Name, "url", url)
			return p, nil
		}
		select {
		case <-p.exited:
			return fail("exited before it was ready (%v)", exitText(p.waitErr))
		case <-deadline.C:
			return fail("was not ready within %s", s.ReadyTimeout)
		case <-ctx.Done():
			_ = p.Stop()
			return nil, fmt.Errorf("launch %s: waiting for it to be ready: %w", s.Name, ctx.Err())
		case <-tick.C:
		}
	}
}

// DieWithParent makes c's process receive SIGKILL when the process that
// starts it ends, however it ends (Linux's parent-death signal), keeping any
// other SysProcAttr settings: a killed himes never leaves a child running
// that holds a run's lock or writes into a log a resumed run reuses (item 4
// of issue 33). Call it before c.Start; the signal follows the starting OS
// thread, which Go keeps for the process's life (no LockOSThread here).
func DieWithParent(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// URL is the ready service's URL.
func (p *Process) URL() string { return p.url }

// Pid is the child's process id (its process group's id too).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// LogPath is the child's log file.
func (p *Process) LogPath() string { return p.spec.Log }

// Exited is closed when the child exits, by Stop or on its own.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Watch calls cancel with an error naming the service, its exit status and
// its log's last lines if the child exits before Stop is called: a
// service that dies during training stops the training with the reason,
// instead of leaving the client to retry against a dead port. The
// returned channel is closed once the exit has been judged.
func (p *Process) Watch(cancel context.CancelCauseFunc) <-chan struct{} {
	judged := make(chan struct{})
	go func() {
		defer close(judged)
		<-p.exited
		p.mu.Lock()
		stopping := p.stopping
		p.mu.Unlock()
		if !stopping {
			cancel(p.crashError())
		}
	}()
	return judged
}

// crashError describes an exit that Stop did not cause; the same error
// value each time, so a caller can tell (errors.Is) that the error its
// command failed with is this crash.
func (p *Process) crashError() error {
	p.crashOnce.Do(func() {
		p.crash = fmt.Errorf("%s (%s) exited while in use (%s); %s", p.spec.Name, commandLine(p.spec.Argv), exitText(p.waitErr), p.tail())
	})
	return p.crash
}

// Stop sends SIGTERM to the child's process group, waits up to StopTimeout
// for the child to exit, then sends SIGKILL to the group. It returns an
// error when the child had crashed before Stop was called (exited on its
// own); an exit caused by the signals is not an error. Stop is idempotent.
func (p *Process) Stop() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stopped {
		return p.stopErr
	}
	p.stopped = true
	select {
	case <-p.exited:
		// It ended on its own before we asked: a crash, unless it exited 0.
		if p.waitErr != nil {
			p.stopErr = p.crashError()
		}
		p.killGroup() // a grandchild it left behind
		p.log.Close()
		return p.stopErr
	default:
	}
	p.stopping = true
	pgid := p.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	t := time.NewTimer(p.spec.StopTimeout)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		slog.Warn("did not stop on SIGTERM: killing it", "service", p.spec.Name, "pid", pgid, "waited", p.spec.StopTimeout)
	}
	// Whatever else is in the group (a shell's children, workers) goes too.
	p.killGroup()
	<-p.exited
	p.log.Close()
	slog.Info("stopped", "service", p.spec.Name, "pid", pgid, "status", exitText(p.waitErr))
	return nil
}

// killGroup sends SIGKILL to the child's process group (ESRCH when it is
// already empty is fine).
func (p *Process) killGroup() { _ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL) }

// tailLines is how many lines of the log an error quotes.
const tailLines = 20

// tail quotes the last lines of the log.
func (p *Process) tail() string {
	lines, err := LastLines(p.spec.Log, tailLines)
	if err != nil {
		return fmt.Sprintf("log %s unreadable: %v", p.spec.Log, err)
	}
	if len(lines) == 0 {
		return fmt.Sprintf("its log %s is empty", p.spec.Log)
	}
	return fmt.Sprintf("last %d lines of %s:\n  %s", len(lines), p.spec.Log, strings.Join(lines, "\n  "))
}

// LastLines returns the last n non-empty lines of the file at path (at most
// its last 64 KiB).
func LastLines(path string, n int) ([]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	const window = 64 << 10
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	off := st.Size() - window
	if off < 0 {
		off = 0
	}
	buf := make([]byte, st.Size()-off)
	if _, err := f.ReadAt(buf, off); err != nil && !errors.Is(err, io.EOF) {
		return nil, err
	}
	var lines []string
	for _, l := range strings.Split(string(buf), "\n") {
		if l = strings.TrimRight(l, "\r"); strings.TrimSpace(l) != "" {
			lines = append(lines, l)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return lines, nil
}

// exitText describes a Wait error.
func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal: " + ws.Signal().String()
		}
	}
	return err.Error()
}

// commandLine renders argv for messages, quoting arguments with spaces.
func commandLine(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if a == "" || strings.ContainsAny(a, " \t\n'\"") {
			a = strconv.Quote(a)
		}
		q[i] = a
	}
	return strings.Join(q, " ")
}

// Ollama describes `BIN serve` on a free loopback port, its models in
// modelsDir (OLLAMA_MODELS; "" = Ollama's default), ready when /api/version
// answers; the URL goes to the Ollama clients (rollout.ollama.hosts,
// the ollama embedder). Extra env (OLLAMA_NUM_PARALLEL, ...) is appended.
func Ollama(bin, logPath, modelsDir string, env ...string) (Spec, error) {
	port, err := FreePort()
	if err != nil {
		return Spec{}, err
	}
	addr := "127.0.0.1:" + strconv.Itoa(port)
	e := []string{"OLLAMA_HOST=" + addr}
	if modelsDir != "" {
		e = append(e, "OLLAMA_MODELS="+modelsDir)
	}
	return Spec{
		Name: "ollama", Argv: []string{bin, "serve"}, Env: append(e, env...), Log: logPath,
		Ready: HTTPGet("http://"+addr, "/api/version"), ReadyTimeout: 2 * time.Minute,
	}, nil
}
