// Package ollamaserve starts a private `ollama serve` on a free loopback
// port, waits until it answers, and stops it with its model runners: the one
// place that knows how to run the server as a child process (the tests'
// internal/ollamatest, and commands that start a server for a run).
package ollamaserve

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"
)

// FindBinary looks for the ollama binary in $HIMES_OLLAMA_BIN, then PATH,
// then $(go env GOPATH)/bin (where scripts/ci/setup-ollama.sh installs it).
func FindBinary() (string, error) {
	if p := os.Getenv("HIMES_OLLAMA_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			return "", fmt.Errorf("HIMES_OLLAMA_BIN=%s: %w", p, err)
		}
		return p, nil
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p, nil
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "ollama")
			if _, err := os.Stat(p); err == nil {
				return p, nil
			}
		}
	}
	return "", errors.New("ollama binary not found ($HIMES_OLLAMA_BIN, PATH, $(go env GOPATH)/bin): " +
		"run scripts/ci/setup-ollama.sh (go install github.com/ollama/ollama@v0.6.5)")
}

// Options says how to run the server.
type Options struct {
	Bin    string   // "" = FindBinary
	Addr   string   // host:port; "" = a free port on 127.0.0.1
	Models string   // OLLAMA_MODELS; "" = Ollama's default (~/.ollama/models)
	Home   string   // HOME of the server (its key pair lives there); "" = inherited
	Env    []string // extra environment (OLLAMA_NUM_PARALLEL=…, …)
	// Ready bounds the wait for the first answer (default 30 s): it turns a
	// server that never comes up into an error with its log, not a hang.
	Ready time.Duration
}

// Server is a running `ollama serve` child process.
type Server struct {
	opt  Options
	Addr string // host:port it listens on
	cmd  *exec.Cmd
	log  *syncBuffer
	// done closes when the process has exited; waitErr is then its status.
	done    chan struct{}
	waitErr error
}

// FreeAddr returns a loopback address with a port nobody listens on now.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("find a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// New prepares a server without starting it (Start does).
func New(opt Options) (*Server, error) {
	var err error
	if opt.Bin == "" {
		if opt.Bin, err = FindBinary(); err != nil {
			return nil, err
		}
	}
	if opt.Addr == "" {
		if opt.Addr, err = FreeAddr(); err != nil {
			return nil, err
		}
	}
	if opt.Ready <= 0 {
		opt.Ready = 30 * time.Second
	}
	return &Server{opt: opt, Addr: opt.Addr}, nil
}

// Start runs a new server (New, then Start).
func Start(ctx context.Context, opt Options) (*Server, error) {
	s, err := New(opt)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// Environ is the environment the server and `ollama` client commands aimed
// at it run with.
func (s *Server) Environ() []string {
	env := append(os.Environ(), "OLLAMA_HOST="+s.Addr)
	if s.opt.Models != "" {
		env = append(env, "OLLAMA_MODELS="+s.opt.Models)
	}
	if s.opt.Home != "" {
		env = append(env, "HOME="+s.opt.Home)
	}
	return append(env, s.opt.Env...)
}

// Bin is the ollama binary the server runs.
func (s *Server) Bin() string { return s.opt.Bin }

// Start (re)starts the process on the same address and model directory and
// waits until it answers HTTP.
func (s *Server) Start(ctx context.Context) error {
	if s.cmd != nil {
		return fmt.Errorf("ollama serve on %s is already running", s.Addr)
	}
	s.log = &syncBuffer{}
	cmd := exec.Command(s.opt.Bin, "serve")
	cmd.Env = s.Environ()
	cmd.Stdout, cmd.Stderr = s.log, s.log
	// Own process group: Stop kills the model runner children with the server.
	// Pdeathsig: a killed test or himes takes the server with it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s serve: %w", s.opt.Bin, err)
	}
	s.cmd = cmd
	s.done = make(chan struct{})
	go func() { s.waitErr = cmd.Wait(); close(s.done) }()
	deadline := time.Now().Add(s.opt.Ready)
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/", nil)
		if err != nil {
			s.Stop()
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			return nil
		}
		select {
		case <-s.done:
			s.cmd = nil
			return fmt.Errorf("ollama serve on %s exited before answering (%v):\n%s", s.Addr, s.waitErr, s.Log())
		case <-ctx.Done():
			s.Stop()
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.Stop()
			return fmt.Errorf("ollama serve did not answer on %s within %s:\n%s", s.Addr, s.opt.Ready, s.Log())
		}
	}
}

// Stop kills the server and its runners (the whole process group) and
// waits for it; a stopped server may be started again.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// URL is the server's base URL.
func (s *Server) URL() string { return "http://" + s.Addr }

// Log is what the server printed since it last started.
func (s *Server) Log() string {
	if s.log == nil {
		return ""
	}
	return s.log.String()
}

// syncBuffer is the server's log, written by its process, read by callers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
