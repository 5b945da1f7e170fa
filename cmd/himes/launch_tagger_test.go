package main

// The MiniLM tagger trained end to end through `himes train` with
// trainer.endpoint "launch": himes starts the reference trainer
// (scripts/lora_trainer, --backend tagger) itself, SIGINT stops the run and
// the trainer after the interrupted step's checkpoint, --resume starts a
// fresh trainer that reloads it, and the run finishes. Needs the project's
// Python environment (bash scripts/ci/setup-python.sh): skipped with the
// reason without it, a failure under CI=true.

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/launch"
)

// pythonEnvOrSkip returns the clone's trainer interpreter, or skips (fails
// under CI=true) with python-env.sh's reason.
func pythonEnvOrSkip(t *testing.T) string {
	t.Helper()
	var stderr bytes.Buffer
	c := exec.Command("bash", "../../scripts/ci/python-env.sh")
	c.Stderr = &stderr
	out, err := c.Output()
	if err != nil {
		reason := fmt.Sprintf("the reference trainer's Python environment is missing (bash scripts/ci/setup-python.sh): %s", strings.TrimSpace(stderr.String()))
		if os.Getenv("CI") == "true" {
			t.Fatal(reason)
		}
		t.Skip(reason)
	}
	return strings.TrimSpace(string(out))
}

// headLines copies the first n lines of src to dst.
func headLines(t *testing.T, src, dst string, n int) {
	t.Helper()
	raw, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(raw), "\n")
	if len(lines) < n {
		t.Fatalf("%s has %d lines, want ≥ %d", src, len(lines), n)
	}
	if err := os.WriteFile(dst, []byte(strings.Join(lines[:n], "")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLaunchedTaggerTrainsInterruptsAndResumes(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts the reference trainer twice and trains the MiniLM tagger (about a minute)")
	}
	pythonEnvOrSkip(t)
	dir := t.TempDir()
	demo, err := filepath.Abs("../../datasets/demo")
	if err != nil {
		t.Fatal(err)
	}
	// A handful of turns: 12 to train on (SFT and GRPO prompts), 8 held out.
	headLines(t, filepath.Join(demo, "train.jsonl"), filepath.Join(dir, "train.jsonl"), 12)
	headLines(t, filepath.Join(demo, "eval.jsonl"), filepath.Join(dir, "eval.jsonl"), 8)
	cfgPath := filepath.Join(dir, "tagger-ci.yaml")
	cfg := fmt.Sprintf(`run: {name: tagger-ci, output_dir: %[1]s, seed: 1}
data: {train: %[1]s/train.jsonl, eval: %[1]s/eval.jsonl, kb: %[2]s/passages.jsonl, user_field: conv_id}
retrieval: {method: bm25, top_k: 3, candidates: 20}
rollout: {responder: extractive}
reward: {alpha: 1, beta: 1, tokenizer: unicode, hit: gold}
grpo:
  sft: {epochs: 4, batch_size: 12, learning_rate: 0.003}
  steps: 6
  prompts_per_step: 4
  group_size: 4
  max_tokens: 64
  temperature: 1.0
  learning_rate: 0.0005
  loss: {type: grpo, kl_coef: 0.0}
  eval_every: 0
  eval_samples: 8
  checkpoint_every: 2
trainer:
  endpoint: launch
  timeout_seconds: 600
  launch:
    args: [--backend, tagger, --threads, "1", --tagger-pos-weight, "5", --tagger-max-seq-tokens, "64"]
`, dir, demo)
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "tagger-ci")

	// Session 1: SIGINT once the first GRPO step is logged.
	outPath := filepath.Join(dir, "session1.out")
	out1, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer out1.Close()
	c := exec.Command(os.Args[0], "train", "--config", cfgPath)
	c.Env = append(os.Environ(), "HIMES_TEST_MAIN=1")
	c.Stdout, c.Stderr = out1, out1
	// The himes child is not in our process group's way; the trainer it
	// starts has a group of its own, so only himes gets the SIGINT, as at a
	// terminal.
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- c.Wait() }()
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for {
		select {
		case err := <-exited:
			log, _ := os.ReadFile(outPath)
			t.Fatalf("himes train exited (%v) before its first GRPO step:\n%s", err, log)
		case <-tick.C:
			if metricsKinds(t, run)["step"] > 0 {
				break wait
			}
		}
	}
	if err := c.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = <-exited
	log1, _ := os.ReadFile(outPath)
	// Interrupted in a step, the loop saves a checkpoint and says so; in a
	// checkpoint save, that save fails. Either way the run stops with an
	// error and the step-0 (SFT) checkpoint at least is there to resume from.
	if err == nil {
		t.Fatalf("session 1 after SIGINT exited 0:\n%s", log1)
	}
	pid1 := launchedPid(t, string(log1))
	assertGone(t, pid1)

	// Session 2: --resume launches a new trainer (policy version 0), which
	// the loop reloads from the run's trainer/ checkpoint, and finishes.
	out, err := runHimesProcess(t, nil, "train", "--config", cfgPath, "--resume")
	if err != nil {
		t.Fatalf("--resume: %v\n%s", err, out)
	}
	assertGone(t, launchedPid(t, out))

	// himes eval --run starts a trainer on the run's checkpoints too.
	evalDir := filepath.Join(dir, "eval")
	out, err = runHimesProcess(t, nil, "eval", "--run", run, "--rewriter", "raw,policy", "--out", evalDir)
	if err != nil {
		t.Fatalf("eval --run: %v\n%s", err, out)
	}
	assertGone(t, launchedPid(t, out))
	if !strings.Contains(out, "policy checkpoint loaded") {
		t.Errorf("eval --run did not load a run checkpoint into the launched trainer:\n%s", out)
	}

	// The trainer's log: the three sessions, in the run directory, each
	// ended by himes's SIGTERM (signal 15), not by the terminal's SIGINT.
	tl, err := os.ReadFile(filepath.Join(run, trainerLogName))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(tl), "signal 15: shutting down"); n != 3 {
		t.Errorf("%s: %d SIGTERM shutdowns, want 3 (one per session):\n%s", trainerLogName, n, tl)
	}
	if _, err := os.Stat(run + ".trainer.log"); !os.IsNotExist(err) {
		t.Errorf("the staged trainer log %s.trainer.log is still there (err %v)", run, err)
	}
	ck, _ := filepath.Glob(filepath.Join(run, "trainer", "run-*"))
	if len(ck) == 0 {
		t.Errorf("no trainer checkpoints in %s/trainer", run)
	}

	// SFT lowered the loss; the run reached its last step.
	var sft []float64
	lastStep := 0
	forEachMetric(t, run, func(m map[string]any) {
		switch m["kind"] {
		case "sft":
			sft = append(sft, m["loss"].(float64))
		case "step":
			lastStep = max(lastStep, int(m["step"].(float64)))
		}
	})
	if len(sft) != 4 {
		t.Fatalf("%d sft lines, want 4 (one per epoch)", len(sft))
	}
	if !(sft[3] < sft[0]) {
		t.Errorf("SFT loss did not fall: %v", sft)
	}
	if lastStep != 6 {
		t.Errorf("last GRPO step %d, want 6", lastStep)
	}

	// The greedy policy changed: the held-out rewrites before training and
	// after it are not all the same.
	before := samplesByPhase(t, run, "init")
	after := samplesByPhase(t, run, "grpo")
	if len(before) == 0 || len(before) != len(after) {
		t.Fatalf("samples: %d before, %d after", len(before), len(after))
	}
	changed := 0
	for i := range before {
		if before[i].PolicyRewrite != after[i].PolicyRewrite {
			changed++
		}
	}
	if changed == 0 {
		t.Errorf("training changed none of the %d greedy rewrites: %q", len(before), rewrites(after))
	}
	t.Logf("sft loss %v; %d/%d greedy rewrites changed; after: %q", sft, changed, len(after), rewrites(after))

}

// A launched trainer that dies in the middle of training (SIGKILL, as the
// OOM killer would) fails the run with its exit and its log's last lines.
// The trainer is a fake interpreter built here: a shell script that takes
// lora_trainer's flags, writes the port file and runs the embedded policy's
// server (himes trainer serve), so the test needs no Python.
func TestLaunchedTrainerCrashFailsTheRun(t *testing.T) {
	dir, fake, args := fakeTrainerRun(t)
	run := filepath.Join(dir, "quickstart")
	_, out, exited := trainUntilFirstStep(t, args, run)
	pid := launchedPid(t, out.String())
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	err := <-exited
	if err == nil {
		t.Fatalf("himes train exited 0 after its trainer was killed:\n%s", out.String())
	}
	i := strings.LastIndex(out.String(), "himes: ")
	if i < 0 {
		t.Fatalf("no error line:\n%s", out.String())
	}
	msg := out.String()[i:]
	for _, want := range []string{"trainer (" + fake + " -m lora_trainer --backend fake", "exited while in use (signal: killed)",
		"fake trainer: the embedded policy on port", filepath.Join(run, trainerLogName)} {
		if !strings.Contains(msg, want) {
			t.Errorf("error lacks %q:\n%s", want, msg)
		}
	}
	t.Logf("%s", msg)
}

// fakeTrainerRun returns a run directory base, a fake interpreter, and the
// arguments of a long quickstart run that launches it as its trainer: a
// shell script that takes lora_trainer's flags, writes the port file and
// runs the embedded policy's server (himes trainer serve), so the test needs
// no Python.
func fakeTrainerRun(t *testing.T) (dir, fake string, args []string) {
	t.Helper()
	dir = t.TempDir()
	fake = filepath.Join(dir, "fakepython")
	script := `#!/bin/sh
pf=
while [ $# -gt 0 ]; do
  if [ "$1" = --port-file ]; then pf=$2; fi
  shift
done
echo "fake trainer: the embedded policy on port $FAKE_PORT"
echo "$FAKE_PORT" > "$pf.tmp" && mv "$pf.tmp" "$pf"
exec "$FAKE_HIMES" trainer serve --config "$FAKE_CONFIG" --addr "127.0.0.1:$FAKE_PORT" --checkpoint-dir "$FAKE_CK"
`
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	port, err := launch.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	qs, err := filepath.Abs("../../configs/quickstart.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return dir, fake, []string{"train", "--config", qs, "--set", "run.output_dir=" + dir, "--set", "grpo.steps=100000",
		"--set", "trainer.endpoint=launch", "--set", "trainer.launch.python=" + fake, "--set", "trainer.launch.args=[--backend, fake]",
		"--set", fmt.Sprintf("trainer.launch.env=[FAKE_PORT=%d, FAKE_HIMES=%s, FAKE_CONFIG=%s, FAKE_CK=%s, HIMES_TEST_MAIN=1]",
			port, os.Args[0], qs, filepath.Join(dir, "ck"))}
}

// A himes killed with SIGKILL runs no deferred Stop: the trainer still dies
// with it (Pdeathsig), leaving no orphan behind.
func TestLaunchedTrainerDiesWithHimes(t *testing.T) {
	dir, _, args := fakeTrainerRun(t)
	c, out, exited := trainUntilFirstStep(t, args, filepath.Join(dir, "quickstart"))
	pid := launchedPid(t, out.String())
	if err := c.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-exited
	// The kernel signals the trainer when himes dies; init reaps it.
	for i := 0; i < 6000 && processAlive(pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	assertGone(t, pid)
}

// trainUntilFirstStep starts himes with args as a child process and returns
// once run's metrics.jsonl has a step line; exited receives the child's end.
func trainUntilFirstStep(t *testing.T, args []string, run string) (c *exec.Cmd, out *syncBuf, exited chan error) {
	t.Helper()
	return startHimesUntil(t, nil, args, "its first step", func(string) bool { return metricsKinds(t, run)["step"] > 0 })
}

// startHimesUntil starts himes with args (and env added to the test's) as a
// child process and returns once ready holds of its output so far, named
// what in the failure when the child exits first; exited receives its end.
func startHimesUntil(t *testing.T, env, args []string, what string, ready func(out string) bool) (c *exec.Cmd, out *syncBuf, exited chan error) {
	t.Helper()
	out = &syncBuf{}
	c = exec.Command(os.Args[0], args...)
	c.Env = append(append(os.Environ(), "HIMES_TEST_MAIN=1"), env...)
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	exited = make(chan error, 1)
	go func() { exited <- c.Wait() }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for !ready(out.String()) {
		select {
		case err := <-exited:
			t.Fatalf("himes %s exited (%v) before %s:\n%s", args[0], err, what, out.String())
		case <-tick.C:
		}
	}
	return c, out, exited
}

// syncBuf is a bytes.Buffer a child process writes while the test reads.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

var launchedRE = regexp.MustCompile(`msg=launched service=trainer pid=(\d+)`)

// launchedPid is the trainer pid himes logged.
func launchedPid(t *testing.T, log string) int {
	t.Helper()
	m := launchedRE.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no launched-trainer line in:\n%s", log)
	}
	pid, _ := strconv.Atoi(m[1])
	return pid
}

// assertGone fails when pid is a live process: himes has exited, so its
// trainer must have been stopped and reaped.
func assertGone(t *testing.T, pid int) {
	t.Helper()
	if processAlive(pid) {
		raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		t.Errorf("trainer process %d outlived himes: %s", pid, raw)
	}
}

// processAlive reports whether pid is a process that is not a zombie.
func processAlive(pid int) bool {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	return err == nil && !strings.Contains(string(raw), ") Z ")
}

func forEachMetric(t *testing.T, run string, f func(map[string]any)) {
	t.Helper()
	fh, err := os.Open(filepath.Join(run, "metrics.jsonl"))
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	sc := bufio.NewScanner(fh)
	sc.Buffer(nil, 1<<24)
	for sc.Scan() {
		var m map[string]any
		if json.Unmarshal(sc.Bytes(), &m) == nil { // a line being written is skipped
			f(m)
		}
	}
}

func metricsKinds(t *testing.T, run string) map[string]int {
	n := map[string]int{}
	forEachMetric(t, run, func(m map[string]any) { n[fmt.Sprint(m["kind"])]++ })
	return n
}

// samplesByPhase reads the newest samples table of an evaluation phase.
func samplesByPhase(t *testing.T, run, phase string) []grpo.SampleRow {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(run, "samples", "*.parquet"))
	var rows []grpo.SampleRow
	for _, f := range files {
		r, err := grpo.ReadSamples(f)
		if err != nil {
			t.Fatal(err)
		}
		if len(r) > 0 && r[0].Phase == phase && (rows == nil || r[0].Step >= rows[0].Step) {
			rows = r
		}
	}
	return rows
}

func rewrites(rows []grpo.SampleRow) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = r.PolicyRewrite
	}
	return out
}
