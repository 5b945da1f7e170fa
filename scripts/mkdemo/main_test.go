package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// The shipped demo must be exactly what the generator makes from the shared
// data with the default flags: nobody edits it by hand.
func TestRegeneratesShippedDemoByteIdentically(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	data := filepath.Dir(filepath.Dir(sharedtest.Shared(t, "kb/passages.jsonl")))
	out := t.TempDir()
	if _, err := run(context.Background(), options{Data: data, Out: out, Seed: 1, Train: 250, Eval: 80, Distractors: 1000}); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"train.jsonl", "eval.jsonl", "passages.jsonl", "README.md"} {
		got, err := os.ReadFile(filepath.Join(out, f))
		if err != nil {
			t.Fatal(err)
		}
		want, err := os.ReadFile(filepath.Join(root, "datasets", "demo", f))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: regenerated file differs from datasets/demo/%s (%d vs %d bytes); rerun go run ./scripts/mkdemo", f, f, len(got), len(want))
		}
	}
}

// A different seed picks different conversations but keeps the targets.
func TestSeedChangesSelection(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): builds the demo from the shared data with two seeds")
	}
	data := filepath.Dir(filepath.Dir(sharedtest.Shared(t, "kb/passages.jsonl")))
	a, b := t.TempDir(), t.TempDir()
	sa, err := run(context.Background(), options{Data: data, Out: a, Seed: 1, Train: 250, Eval: 80, Distractors: 100})
	if err != nil {
		t.Fatal(err)
	}
	sb, err := run(context.Background(), options{Data: data, Out: b, Seed: 2, Train: 250, Eval: 80, Distractors: 100})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []summary{sa, sb} {
		if s.TrainTurns < 250 || s.EvalTurns < 80 {
			t.Errorf("seed %d: %d train, %d eval turns; want at least the targets", s.Seed, s.TrainTurns, s.EvalTurns)
		}
		if s.Distractors != 100 {
			t.Errorf("seed %d: %d distractors, want 100", s.Seed, s.Distractors)
		}
	}
	ea, _ := os.ReadFile(filepath.Join(a, "eval.jsonl"))
	eb, _ := os.ReadFile(filepath.Join(b, "eval.jsonl"))
	if bytes.Equal(ea, eb) {
		t.Error("seeds 1 and 2 chose the same eval set")
	}
}
