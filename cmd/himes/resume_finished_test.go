package main

import (
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// treeDigest maps every file under dir to the SHA-256 of its content.
func treeDigest(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		rel, _ := filepath.Rel(dir, path)
		out[rel] = hex.EncodeToString(sum[:])
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestResumeOfFinishedRun: --resume of a finished run says so and leaves
// the run exactly as it was; with a larger grpo.steps it continues to the
// new total, and the extended run equals one trained to that total at once
// (constant learning rate).
func TestResumeOfFinishedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the demo three times")
	}
	refDir, dir := t.TempDir(), t.TempDir()
	if out, err := runHimesProcess(t, nil, "train", "--config", writeResumeConfig(t, refDir)); err != nil {
		t.Fatalf("reference run: %v\n%s", err, out)
	}
	cfg := writeResumeConfig(t, dir)
	if out, err := runHimesProcess(t, nil, "train", "--config", cfg, "--set", "grpo.steps=3"); err != nil {
		t.Fatalf("3-step run: %v\n%s", err, out)
	}
	run := filepath.Join(dir, "r")
	before := treeDigest(t, run)

	out, err := runHimesProcess(t, nil, "train", "--config", cfg, "--set", "grpo.steps=3", "--resume")
	if err != nil {
		t.Fatalf("resume of the finished run: %v\n%s", err, out)
	}
	if !strings.Contains(out, "already finished at step 3 (grpo.steps 3)") || !strings.Contains(out, "--set grpo.steps=N") {
		t.Errorf("resume of a finished run does not say so:\n%s", out)
	}
	if strings.Contains(out, "loaded training data") {
		t.Errorf("resume of a finished run loaded the data:\n%s", out)
	}
	if after := treeDigest(t, run); !maps.Equal(before, after) {
		t.Errorf("resume of a finished run changed its directory:\nbefore %v\nafter  %v", slices.Sorted(maps.Keys(before)), slices.Sorted(maps.Keys(after)))
	}
	// Fewer steps than the run has done: finished too.
	if out, err := runHimesProcess(t, nil, "train", "--config", cfg, "--set", "grpo.steps=2", "--resume"); err != nil ||
		!strings.Contains(out, "already finished at step 3 (grpo.steps 2)") {
		t.Errorf("resume with fewer steps: %v\n%s", err, out)
	}

	out, err = runHimesProcess(t, nil, "train", "--config", cfg, "--resume")
	if err != nil {
		t.Fatalf("extending resume: %v\n%s", err, out)
	}
	if !strings.Contains(out, `msg="resume: extending the finished run" from_step=3 to_step=6`) {
		t.Errorf("the extension is not logged:\n%s", out)
	}
	got, want := readMetrics(t, filepath.Join(run, "metrics.jsonl")), readMetrics(t, filepath.Join(refDir, "r", "metrics.jsonl"))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the run extended from 3 to 6 steps differs from a 6-step run: %s", firstDiff(got, want))
	}
	if _, err := os.Stat(filepath.Join(run, "config.resume-1.yaml")); err != nil {
		t.Errorf("the extending resume is the run's first (the no-op ones counted none): %v", err)
	}
}
