package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
)

// shortRun is writeResumeConfig cut to two steps (a checkpoint at step 2).
var shortRun = []string{"--set", "grpo.steps=2"}

func train(t *testing.T, cfg string, args ...string) (string, error) {
	t.Helper()
	return runHimesProcess(t, nil, append(append([]string{"train", "--config", cfg}, shortRun...), args...)...)
}

// Item 4 of issue 14: two `--resume` of one run both ran.
func TestTrainRefusesARunDirectoryInUse(t *testing.T) {
	dir := t.TempDir()
	cfg := writeResumeConfig(t, dir)
	if out, err := train(t, cfg); err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	before, err := os.ReadFile(filepath.Join(dir, "r", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	held, err := rundir.Open(dir, "r", rundir.Resume) // this process uses the run
	if err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("is in use by pid %d", os.Getpid())
	for _, flag := range []string{"--resume", "--overwrite"} {
		out, err := train(t, cfg, flag, "--set", "grpo.steps=3")
		if err == nil || !strings.Contains(out, want) {
			t.Fatalf("%s of a run in use: err %v, want %q in\n%s", flag, err, want, out)
		}
	}
	after, _ := os.ReadFile(filepath.Join(dir, "r", "metrics.jsonl"))
	if string(after) != string(before) {
		t.Fatal("a refused process changed the run's metrics")
	}
	held.Close()
	if out, err := train(t, cfg, "--resume"); err != nil {
		t.Fatalf("resume once the run is free: %v\n%s", err, out)
	}
}

// Item 5 of issue 14: --overwrite deleted any directory recursively.
func TestTrainOverwriteRefusesADirectoryItDidNotMake(t *testing.T) {
	dir := t.TempDir()
	cfg := writeResumeConfig(t, dir)
	photos := filepath.Join(dir, "r")
	if err := os.MkdirAll(filepath.Join(photos, "holiday"), 0o755); err != nil {
		t.Fatal(err)
	}
	photo := filepath.Join(photos, "holiday", "beach.jpg")
	if err := os.WriteFile(photo, []byte("jpeg"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := train(t, cfg, "--overwrite")
	if err == nil || !strings.Contains(out, "not a himes run directory") {
		t.Fatalf("--overwrite of a photo folder: err %v\n%s", err, out)
	}
	if b, err := os.ReadFile(photo); err != nil || string(b) != "jpeg" {
		t.Fatalf("the photo is gone: %v", err)
	}
	if entries, _ := os.ReadDir(photos); len(entries) != 1 {
		t.Fatalf("the folder changed: %v", entries)
	}
	// A run directory himes made is overwritten as before.
	if err := os.RemoveAll(photos); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 2; i++ {
		if out, err := train(t, cfg, "--overwrite"); err != nil {
			t.Fatalf("overwrite %d: %v\n%s", i, err, out)
		}
	}
}

// Item 6 of issue 14: a failed `himes train` left a partial run directory,
// and running it again then demanded --resume or --overwrite.
func TestFailedTrainLeavesNoRunDirectory(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): runs the CLI's train several times")
	}
	dir := t.TempDir()
	cfg := writeResumeConfig(t, dir)
	badData := filepath.Join(dir, "bad.jsonl")
	if err := os.WriteFile(badData, []byte("{\"conv_id\": \"c\", \n"), 0o644); err != nil {
		t.Fatal(err)
	}
	failures := map[string]struct {
		args []string
		want string
	}{
		"bad data": {[]string{"--set", "data.train=" + badData}, "load training data"},
		"unreachable responder": {[]string{"--set", "rollout.responder=openai", "--set", "rollout.openai.model=m",
			"--set", "rollout.openai.base_urls=[http://127.0.0.1:1/v1]", "--set", "rollout.openai.retries=0"}, "responder"},
		// Passes validation (its sample prompt has a short history) and fails
		// on the first real prompt, after the run directory was created.
		"template error at the first prompt": {[]string{"--set",
			`data.prompt.template="{{.Question}}{{if gt (len .History) 2}}{{index .History 99}}{{end}}"`},
			"removed the partial run directory"},
	}
	for name, c := range failures {
		t.Run(name, func(t *testing.T) {
			out, err := train(t, cfg, c.args...)
			if err == nil || !strings.Contains(out, c.want) {
				t.Fatalf("the run must fail with %q: %v\n%s", c.want, err, out)
			}
			if _, err := os.Stat(filepath.Join(dir, "r")); !os.IsNotExist(err) {
				entries, _ := os.ReadDir(filepath.Join(dir, "r"))
				t.Fatalf("the failed run left its directory (%v):\n%s", entries, out)
			}
		})
	}
	// The same command, fixed, needs no flag.
	if out, err := train(t, cfg); err != nil {
		t.Fatalf("run after the failures: %v\n%s", err, out)
	}
}

// Item 9 of issue 14: resume accepted a changed config without a word.
func TestResumeRefusesAChangedConfig(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the quickstart, then resumes it")
	}
	dir := t.TempDir()
	cfg := writeResumeConfig(t, dir)
	if out, err := train(t, cfg); err != nil {
		t.Fatalf("first run: %v\n%s", err, out)
	}
	changed := []string{"--resume", "--set", "grpo.steps=3", "--set", "grpo.group_size=8", "--set", "reward.alpha=0.5", "--set", "grpo.learning_rate=0.01"}
	out, err := train(t, cfg, changed...)
	if err == nil {
		t.Fatalf("resume with a changed config must be refused:\n%s", out)
	}
	for _, want := range []string{"--allow-config-change", "grpo.group_size: 4 → 8", "reward.alpha: 1 → 0.5", "grpo.learning_rate: 0.05 → 0.01"} {
		if !strings.Contains(out, want) {
			t.Errorf("refusal does not mention %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "  grpo.steps") {
		t.Errorf("extending the run (grpo.steps) is not a refused change:\n%s", out)
	}
	if out, err := train(t, cfg, append(changed, "--allow-config-change")...); err != nil {
		t.Fatalf("allowed resume: %v\n%s", err, out)
	}
	orig, _ := os.ReadFile(filepath.Join(dir, "r", "config.yaml"))
	resumed, err := os.ReadFile(filepath.Join(dir, "r", "config.resume-1.yaml"))
	if err != nil {
		t.Fatal("each resume keeps its config:", err)
	}
	if !strings.Contains(string(orig), "group_size: 4") || !strings.Contains(string(resumed), "group_size: 8") {
		t.Fatalf("config.yaml must keep the original (group_size 4), config.resume-1.yaml the resumed one (8)")
	}
	// The next resume compares with the config the run last ran with.
	if out, err := train(t, cfg, append(changed[:len(changed):len(changed)], "--set", "grpo.steps=4")...); err != nil {
		t.Fatalf("resume with the last run's config: %v\n%s", err, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "r", "config.resume-2.yaml")); err != nil {
		t.Fatal(err)
	}
	if out, err := train(t, cfg, "--resume", "--set", "grpo.steps=5"); err == nil || !strings.Contains(out, "grpo.group_size: 8 → 4") {
		t.Fatalf("going back to the original config is a change too: err %v\n%s", err, out)
	}
}
