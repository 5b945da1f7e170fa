package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/internal/sharedtest"

	"github.com/himes-rl/himes/rollout"
)

// writeResumeConfig writes a small quickstart-like config whose runs go to dir.
func writeResumeConfig(t *testing.T, dir string) string {
	t.Helper()
	demo := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	cfg := fmt.Sprintf(`run: {name: r, output_dir: %q, seed: 7}
data: {train: %q, eval: %q, kb: %q}
retrieval: {top_k: 3, candidates: 10}
reward: {hit: gold}
grpo:
  steps: 6
  prompts_per_step: 4
  group_size: 4
  learning_rate: 0.05
  eval_every: 3
  eval_turns: 6
  checkpoint_every: 2
  keep_checkpoints: 0
  sft: {epochs: 1, batch_size: 64, learning_rate: 0.1}
`, dir, filepath.Join(demo, "train.jsonl"), filepath.Join(demo, "eval.jsonl"), filepath.Join(demo, "passages.jsonl"))
	p := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(p, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestResumeAfterSIGKILLIsExact kills `himes train` at several points of a
// step and checks that --resume produces the same metrics and ledgers as an
// uninterrupted run (timings and answer-cache hits excepted: they measure the
// machine and the process's warm cache, not the run).
func TestResumeAfterSIGKILLIsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): runs the CLI several times")
	}
	refDir := t.TempDir()
	if out, err := runHimesProcess(t, nil, "train", "--config", writeResumeConfig(t, refDir)); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	refMetrics := readMetrics(t, filepath.Join(refDir, "r", "metrics.jsonl"))
	if len(refMetrics) == 0 {
		t.Fatal("reference run wrote no metrics")
	}

	kills := []struct {
		at   string
		sets []string
		// stale: a ledger file of a step after the resumed checkpoint, set aside.
		stale string
	}{
		{at: "before_sample:1"}, {at: "before_sample:3"}, {at: "before_update:4"}, {at: "after_update:3"}, {at: "after_update:6"},
		// A file per step: step 1's is on disk when the kill comes, after the
		// checkpoint of step 0; resume sets it aside and writes step 1 again.
		{at: "before_sample:2", sets: []string{"--set", "grpo.ledger_steps=1"}, stale: "steps-000001-000001.parquet.stale"},
	}
	for _, kill := range kills {
		t.Run(strings.Join(append([]string{kill.at}, kill.sets...), " "), func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeResumeConfig(t, dir)
			out, err := runHimesProcess(t, []string{faultEnv + "=" + kill.at}, append([]string{"train", "--config", cfg}, kill.sets...)...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("want the run killed by SIGKILL at %s, got %v\n%s", kill.at, err, out)
			}
			if out, err := runHimesProcess(t, nil, append([]string{"train", "--config", cfg, "--resume"}, kill.sets...)...); err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			if kill.stale != "" {
				if _, err := os.Stat(filepath.Join(dir, "r", "ledger", kill.stale)); err != nil {
					t.Errorf("the killed run's ledger of a step after the checkpoint is not set aside: %v", err)
				}
			}
			got := readMetrics(t, filepath.Join(dir, "r", "metrics.jsonl"))
			if !reflect.DeepEqual(got, refMetrics) {
				t.Errorf("metrics differ from the uninterrupted run:\n got %d lines\nwant %d lines\nfirst difference: %s",
					len(got), len(refMetrics), firstDiff(got, refMetrics))
			}
			a, b := runLedgers(t, filepath.Join(refDir, "r")), runLedgers(t, filepath.Join(dir, "r"))
			for step := 1; step <= 6; step++ {
				if len(a[step]) == 0 || !reflect.DeepEqual(a[step], b[step]) {
					t.Errorf("ledger of step %d differs from the uninterrupted run (%d vs %d records)", step, len(b[step]), len(a[step]))
				}
			}
		})
	}
}

// TestResumeWithGreedyBaselineIsExact: with advantage.estimator greedy each
// step also rolls out the greedy rewrites (its baseline); a run killed
// before and after an update resumes to the uninterrupted run's metrics
// (greedy_reward included) and ledgers.
func TestResumeWithGreedyBaselineIsExact(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): runs the CLI several times")
	}
	greedy := []string{"--set", "grpo.advantage.estimator=greedy"}
	refDir := t.TempDir()
	if out, err := runHimesProcess(t, nil, append([]string{"train", "--config", writeResumeConfig(t, refDir)}, greedy...)...); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	refMetrics := readMetrics(t, filepath.Join(refDir, "r", "metrics.jsonl"))
	steps := 0
	for _, m := range refMetrics {
		if m["kind"] == "step" {
			steps++
			if _, ok := m["greedy_reward"]; !ok {
				t.Fatalf("step %v logs no greedy_reward: the greedy rollouts did not run", m["step"])
			}
		}
	}
	if steps != 6 {
		t.Fatalf("reference run logged %d steps, want 6", steps)
	}
	for _, at := range []string{"before_update:4", "after_update:3"} {
		t.Run(at, func(t *testing.T) {
			dir := t.TempDir()
			cfg := writeResumeConfig(t, dir)
			out, err := runHimesProcess(t, []string{faultEnv + "=" + at}, append([]string{"train", "--config", cfg}, greedy...)...)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("want the run killed by SIGKILL at %s, got %v\n%s", at, err, out)
			}
			if out, err := runHimesProcess(t, nil, append([]string{"train", "--config", cfg, "--resume"}, greedy...)...); err != nil {
				t.Fatalf("resume: %v\n%s", err, out)
			}
			if got := readMetrics(t, filepath.Join(dir, "r", "metrics.jsonl")); !reflect.DeepEqual(got, refMetrics) {
				t.Errorf("metrics differ from the uninterrupted run: %s", firstDiff(got, refMetrics))
			}
			a, b := runLedgers(t, filepath.Join(refDir, "r")), runLedgers(t, filepath.Join(dir, "r"))
			for step := 1; step <= 6; step++ {
				if len(a[step]) == 0 || !reflect.DeepEqual(a[step], b[step]) {
					t.Errorf("ledger of step %d differs from the uninterrupted run (%d vs %d records)", step, len(b[step]), len(a[step]))
				}
			}
		})
	}
}

// readMetrics decodes metrics.jsonl without the fields that measure time
// (stage timings, time stamps, elapsed_s) or the process's cache.
func readMetrics(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		for k := range m {
			if strings.HasPrefix(k, "t_") || k == "cache_hits" || k == "time" || k == "elapsed_s" {
				delete(m, k)
			}
		}
		out = append(out, m)
	}
	return out
}

// runLedgers reads a run's ledger files (readLedger) by step.
func runLedgers(t *testing.T, runPath string) map[int][]rollout.Record {
	t.Helper()
	files, err := rundir.LedgerFiles(runPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]rollout.Record{}
	for _, f := range files {
		for _, r := range readLedger(t, f.Path) {
			out[r.Step] = append(out[r.Step], r)
		}
	}
	return out
}

func readLedger(t *testing.T, path string) []rollout.Record {
	t.Helper()
	recs, err := rollout.ReadLedger(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range recs {
		recs[i].RetrieveSeconds, recs[i].RespondSeconds, recs[i].ScoreSeconds = 0, 0, 0
		recs[i].CacheHit = false
	}
	return recs
}

func firstDiff(a, b []map[string]any) string {
	for i := 0; i < len(a) && i < len(b); i++ {
		if !reflect.DeepEqual(a[i], b[i]) {
			return fmt.Sprintf("line %d:\n got %v\nwant %v", i+1, a[i], b[i])
		}
	}
	return "(one is a prefix of the other)"
}
