package main

import (
	"bytes"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// runCLILogged runs a himes command in-process and returns its stdout, its
// stderr (where its logs go) and its error.
func runCLILogged(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	root := newRootCmd()
	var out, errb bytes.Buffer
	root.SetArgs(args)
	root.SetOut(&out)
	root.SetErr(&errb)
	err := root.Execute()
	return out.String(), errb.String(), err
}

// loadLines are the log lines of the expensive setup: the data and the
// index. An argument error must come before either.
var loadLines = []string{"loaded training data", "BM25 ready"}

// wantEarlyError checks that the command failed with an error containing
// every one of want, and that nothing was loaded before it.
func wantEarlyError(t *testing.T, logs string, err error, want ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("want an error containing %q, got none\n%s", want, logs)
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q lacks %q", err, w)
		}
	}
	for _, l := range loadLines {
		if strings.Contains(logs, l) {
			t.Errorf("the error came after the expensive setup (log has %q):\n%s", l, logs)
		}
	}
}

// ollamaWithout is an Ollama server that serves one model, "other".
func ollamaWithout(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/tags" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte(`{"models":[{"name":"other:latest","model":"other:latest","digest":"abc"}]}`))
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

func TestArgumentErrorsComeBeforeLoading(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	cfg := filepath.Join(root, "configs", "quickstart.yaml")
	out := t.TempDir()
	ollama := ollamaWithout(t)
	badQueries := filepath.Join(out, "queries.jsonl")
	if err := os.WriteFile(badQueries, []byte("{\"qid\": \"a\", \"text\": \"x\"}\n{\"qid\": 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	badData := filepath.Join(out, "data.jsonl")
	if err := os.WriteFile(badData, []byte("{\"conv_id\": \"c\", \"turn\": \"one\"}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	notEval := filepath.Join(t.TempDir(), "mine")
	if err := os.MkdirAll(notEval, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(notEval, "notes.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	demoEval := filepath.Join(root, "datasets", "demo", "eval.jsonl")
	evalCopy := filepath.Join(t.TempDir(), "copy.jsonl")
	demoCopy(t, "eval.jsonl", evalCopy)
	evalSameName := filepath.Join(t.TempDir(), "eval.jsonl")
	demoCopy(t, "eval.jsonl", evalSameName)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	busy := ln.Addr().String()

	for _, c := range []struct {
		name string
		args []string
		want []string
	}{
		{"mistyped rewriter", []string{"eval", "--config", cfg, "--rewriter", "raw,polcy"}, []string{`"polcy"`, "want raw, concat"}},
		{"rewriter twice", []string{"eval", "--config", cfg, "--rewriter", "raw,gold,raw"}, []string{`"raw"`, "twice"}},
		{"--checkpoint without the policy rewriter", []string{"eval", "--config", cfg, "--checkpoint", "best", "--rewriter", "raw,gold"},
			[]string{`--checkpoint "best"`, "has no policy", "raw,gold,policy"}},
		{"ollama rewriter without a model", []string{"eval", "--config", cfg, "--rewriter", "raw,ollama:"}, []string{"empty model name"}},
		{"ollama rewriter the host lacks", []string{"eval", "--config", cfg, "--rewriter", "ollama:missing", "--ollama-host", ollama},
			[]string{"ollama:missing", "ollama pull missing"}},
		{"--out a folder that is not an eval's", []string{"eval", "--config", cfg, "--out", notEval}, []string{notEval, "not a himes eval folder"}},
		{"malformed --data", []string{"eval", "--config", cfg, "--data", badData}, []string{"--data", "data.jsonl"}},
		// Each of these evaluated every turn twice, doubling the turn count.
		{"--data file twice", []string{"eval", "--config", cfg, "--data", demoEval + "," + demoEval}, []string{"--data", "eval.jsonl given twice"}},
		{"--data conversation in two files", []string{"eval", "--config", cfg, "--data", demoEval + "," + evalCopy},
			[]string{"--data", "is in both", "conversation ids must be unique"}},
		{"responder model the host lacks", []string{"train", "--config", cfg, "--set", "run.output_dir=" + out,
			"--set", "rollout.responder=ollama", "--set", "rollout.ollama.model=missing", "--set", "rollout.ollama.hosts=[" + ollama + "]"},
			[]string{"responder", "ollama pull missing"}},
		{"reward-agreement --data sharing a name", []string{"ablate", "reward-agreement", "--config", cfg, "--data", demoEval + "," + evalSameName, "--out", filepath.Join(out, "ra")},
			[]string{"would both be reported as \"eval\""}},
		{"memory-quant --data file twice", []string{"ablate", "memory-quant", "--config", cfg, "--data", demoEval + "," + demoEval, "--out", filepath.Join(out, "mq")},
			[]string{"eval.jsonl given twice"}},
		{"reward-agreement --samples-only with one sample", []string{"ablate", "reward-agreement", "--config", cfg, "--samples-only", "--samples", "1", "--out", filepath.Join(out, "ra")},
			[]string{"--samples-only needs --samples ≥ 2"}},
		{"malformed --queries", []string{"search", "--config", cfg, "--trec-run", filepath.Join(out, "r.trec"), "--queries", badQueries},
			[]string{"queries.jsonl:2"}},
		{"--trec-run into a missing directory", []string{"search", "--config", cfg, "--trec-run", filepath.Join(out, "no", "r.trec"),
			"--queries", filepath.Join(root, "datasets", "demo", "eval.jsonl")}, []string{"--trec-run"}},
		{"negative --limit", []string{"eval", "--config", cfg, "--limit", "-1"}, []string{"--limit and --concurrency must be ≥ 0", "-1"}},
		{"--parallel 0", []string{"ablate", "sweep", "--config", cfg, "--grid", "grid.yaml", "--parallel", "0"}, []string{"--parallel must be ≥ 1, got 0"}},
		{"--trainer-start-timeout 0", []string{"ablate", "transfer", "--config", cfg, "--collections", "a.jsonl,b.jsonl", "--trainer-start-timeout", "0s"},
			[]string{"--trainer-start-timeout must be > 0, got 0s"}},
		{"trainer serve --read-timeout 0", []string{"trainer", "serve", "--read-timeout", "0s", "--addr", "127.0.0.1:0"}, []string{"--read-timeout must be > 0, got 0s"}},
		{"export --max-tokens -1", []string{"export", "ollama", "--adapter", "a", "--base", "b", "--out", filepath.Join(out, "exp"), "--max-tokens", "-1"},
			[]string{"--max-tokens -1: want ≥ 1"}},
		{"trainer check --lr -1", []string{"trainer", "check", "--endpoint", "embedded", "--lr", "-1"}, []string{"--lr must be in (0, 1], got -1"}},
		{"trainer check --timeout 0", []string{"trainer", "check", "--endpoint", "http://127.0.0.1:9", "--timeout", "0s"}, []string{"--timeout must be > 0, got 0s"}},
		{"--jobs 0", []string{"ablate", "transfer", "--config", cfg, "--collections", "a.jsonl,b.jsonl", "--jobs", "0"}, []string{"--jobs must be ≥ 1, got 0"}},
		{"--block-docs without --disk", []string{"index", "build", "--kb", "kb.jsonl", "--out", filepath.Join(out, "idx"), "--block-docs", "5"},
			[]string{"--block-docs 5", "only with --disk"}},
		{"negative --k", []string{"search", "--config", cfg, "--k", "-5", "x"}, []string{"--k and --candidates must be ≥ 0", "-5"}},
		{"--turn without memory", []string{"search", "--config", cfg, "--turn", "c#1"}, []string{"--turn shows long-term memory"}},
		{"retrieval serve on a busy port", []string{"retrieval", "serve", "--config", cfg, "--addr", busy}, []string{"listen on " + busy}},
		{"trainer serve on a busy port", []string{"trainer", "serve", "--config", cfg, "--addr", busy}, []string{"listen on " + busy}},
	} {
		t.Run(c.name, func(t *testing.T) {
			// Outputs go to out (so that a regression writes where the
			// check below sees it, not into the source tree).
			args := c.args
			if args[0] == "eval" {
				args = append(args, "--set", "run.output_dir="+out)
			}
			_, logs, err := runCLILogged(t, args...)
			wantEarlyError(t, logs, err, c.want...)
		})
	}
	if entries, err := os.ReadDir(out); err != nil || len(entries) != 2 {
		t.Errorf("the failed commands left files behind in %s: %v %v", out, entries, err)
	}
}

// A chunk stride without chunk words was ignored by the build but recorded in
// the index; it is refused by key, from the flag and from a config.
func TestChunkStrideAloneIsRefused(t *testing.T) {
	kb := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo", "passages.jsonl")
	out := filepath.Join(t.TempDir(), "ix")
	_, err := runCLI(t, "index", "build", "--kb", kb, "--out", out, "--chunk-stride", "5")
	if err == nil || !strings.Contains(err.Error(), "chunk_stride: is 5 without chunk_words") {
		t.Errorf("index build --chunk-stride 5: got %v", err)
	}
	if _, err := os.Stat(out); !os.IsNotExist(err) {
		t.Errorf("an index was written: %v", err)
	}
	_, err = runCLI(t, "search", "--kb", kb, "--set", "retrieval.chunk_stride=3", "door")
	if err == nil || !strings.Contains(err.Error(), "retrieval.chunk_stride") {
		t.Errorf("search --set retrieval.chunk_stride=3: got %v", err)
	}
	if _, err := runCLI(t, "index", "build", "--kb", kb, "--out", out, "--chunk-words", "40", "--chunk-stride", "20"); err != nil {
		t.Errorf("a stride with its window: %v", err)
	}
}
