package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// brokenOllama serves the model list, then answers every chat with a 200
// that has no "message" while broken is set, and a fixed answer otherwise.
func brokenOllama(t *testing.T, broken *atomic.Bool) string {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/tags", func(w http.ResponseWriter, _ *http.Request) {
		_ = json.NewEncoder(w).Encode(map[string]any{"models": []map[string]any{{"name": "tiny:latest", "model": "tiny:latest", "digest": "d1"}}})
	})
	mux.HandleFunc("POST /api/chat", func(w http.ResponseWriter, _ *http.Request) {
		if broken.Load() {
			_ = json.NewEncoder(w).Encode(map[string]any{"model": "tiny", "done": true})
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"model": "tiny", "done": true,
			"message": map[string]string{"role": "assistant", "content": "the eiffel tower"}})
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv.URL
}

// A run whose every rollout fails used to exit 0 (640/640 failed): it stops
// with a clear error and a checkpoint of the last completed step, and
// --resume finishes it once the responder answers.
func TestTrainStopsWhenEveryRolloutFails(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): runs the CLI three times")
	}
	var broken atomic.Bool
	url := brokenOllama(t, &broken)
	out := t.TempDir()
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	args := []string{"--config", cfg, "--set", "run.output_dir=" + out, "--set", "run.name=f",
		"--set", "grpo.steps=2", "--set", "grpo.prompts_per_step=4", "--set", "grpo.group_size=4",
		"--set", "data.eval=", "--set", "data.eval_fraction=0", // no evaluation: step 1 meets the failures
		"--set", "rollout.responder=ollama", "--set", "rollout.ollama.model=tiny",
		"--set", "rollout.ollama.hosts=[" + url + "]", "--set", "rollout.ollama.retries=0"}
	broken.Store(true)
	o, err := runHimesProcess(t, nil, append([]string{"train"}, args...)...)
	if err == nil {
		t.Fatalf("train exited 0 with every rollout failing:\n%s", o)
	}
	// Nothing was trained, so the run directory is removed and the same
	// command (without --resume) starts again (grpo's tests cover a resume
	// after a failure later in a run).
	for _, w := range []string{"step 1: rollouts: 16 of 16 rollouts failed (malformed 16)", "max_failed_fraction 0.5", "no message",
		"nothing was trained yet: run the same command again"} {
		if !strings.Contains(o, w) {
			t.Errorf("output lacks %q:\n%s", w, o)
		}
	}
	if _, err := os.Stat(filepath.Join(out, "f")); !os.IsNotExist(err) {
		t.Errorf("the run that trained nothing left its directory: %v", err)
	}

	broken.Store(false)
	if o, err := runHimesProcess(t, nil, append([]string{"train"}, args...)...); err != nil {
		t.Fatalf("run again: %v\n%s", err, o)
	}
	steps := 0
	for _, m := range readMetrics(t, filepath.Join(out, "f", "metrics.jsonl")) {
		if m["kind"] == "step" {
			steps++
			if m["failed_rollouts"].(float64) != 0 {
				t.Errorf("step %v: %v failed rollouts", m["step"], m["failed_rollouts"])
			}
		}
	}
	if steps != 2 {
		t.Errorf("%d step lines after running again, want 2", steps)
	}

	// himes eval against the broken responder: outputs written, exit non-zero.
	broken.Store(true)
	evalDir := filepath.Join(out, "ev")
	o, err = runHimesProcess(t, nil, append([]string{"eval", "--rewriter", "raw", "--limit", "2", "--resamples", "40",
		"--data", filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo", "eval.jsonl"), "--out", evalDir}, args...)...)
	if err == nil || !strings.Contains(o, "failed turns above rollout.max_failed_fraction 0.5: raw ") {
		t.Errorf("eval with every turn failing: err %v\n%s", err, o)
	}
	if _, err := os.Stat(filepath.Join(evalDir, "turns.parquet")); err != nil {
		t.Errorf("eval outputs not written: %v", err)
	}
}
