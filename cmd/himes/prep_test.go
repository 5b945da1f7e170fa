package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// runPrep runs `himes prep ARGS` in-process and returns its stdout.
func runPrep(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := newPrepCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.ExecuteContext(context.Background())
	return out.String(), err
}

func countLines(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Count(b, []byte("\n"))
}

func TestPrepSFTOnDemo(t *testing.T) {
	in := filepath.Join("..", "..", "datasets", "demo", "train.jsonl")
	dir := t.TempDir()
	out, err := runPrep(t, "sft", "--in", in, "--out", dir, "--no-rewrite-ratio", "0.25", "--val-fraction", "0.2", "--seed", "3")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !strings.Contains(out, "prep sft: 252 input turns from 1 file(s)") || !strings.Contains(out, "dropped, by reason") {
		t.Errorf("summary:\n%s", out)
	}
	var sum prepSummary
	b, err := os.ReadFile(filepath.Join(dir, "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &sum); err != nil {
		t.Fatal(err)
	}
	if sum.Seed != 3 || sum.Prep.NoRewriteRatio != 0.25 || sum.Prep.ValFraction != 0.2 || sum.Stats.Input != 252 {
		t.Errorf("summary.json: %+v", sum)
	}
	if n := countLines(t, filepath.Join(dir, "prompt_completion", "train.jsonl")); n != sum.Stats.Train || n == 0 {
		t.Errorf("%d prompt/completion train rows, summary says %d", n, sum.Stats.Train)
	}
	if n := countLines(t, filepath.Join(dir, "messages", "validation.jsonl")); n != sum.Stats.Validation || n == 0 {
		t.Errorf("%d messages validation rows, summary says %d", n, sum.Stats.Validation)
	}
	// Every turn is kept or dropped for a reason: the demo turns all have a
	// rewrite, so rewrite examples plus drops other than the ratio's account
	// for every input turn that is not a no-rewrite-needed one.
	kept := 0
	for _, n := range sum.Stats.Kinds {
		kept += n
	}
	if kept != sum.Stats.Train+sum.Stats.Validation {
		t.Errorf("kinds add up to %d, splits to %d", kept, sum.Stats.Train+sum.Stats.Validation)
	}
}

func TestPrepRLAndQueries(t *testing.T) {
	in := filepath.Join("..", "..", "datasets", "demo", "eval.jsonl")
	dir := t.TempDir()
	out, err := runPrep(t, "rl", "--in", in, "--out", dir, "--val-fraction", "0")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	// Every demo turn has an answer and they are all distinct: all are kept.
	if n := countLines(t, filepath.Join(dir, "train.jsonl")); n != 84 {
		t.Errorf("%d RL prompts, want the 84 demo eval turns\n%s", n, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "train.parquet")); err != nil {
		t.Error(err)
	}
	q := filepath.Join(dir, "queries.jsonl")
	if out, err := runPrep(t, "queries", "--in", in, "--out", q); err != nil || !strings.Contains(out, "wrote 84 queries of 11 users") {
		t.Errorf("queries: %v\n%s", err, out)
	}
}

func TestPrepErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := runPrep(t, "sft", "--out", dir); err == nil || !strings.Contains(err.Error(), "no input") {
		t.Errorf("no input: %v", err)
	}
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(`{"conv_id": "a", "turn": 1, "question": "q", "rewrite": "r"}`+"\n"+`{"conv_id": "a", "turn": "x y", "question": 5}`+"\n"), 0o644)
	_, err := runPrep(t, "sft", "--in", bad, "--out", filepath.Join(dir, "o"))
	if err == nil || !strings.Contains(err.Error(), bad+":2: field \"question\"") {
		t.Errorf("bad line: %v", err)
	}
	out, err := runPrep(t, "sft", "--in", bad, "--out", filepath.Join(dir, "o"), "--skip-bad", "--val-fraction", "0")
	if err != nil || !strings.Contains(out, "invalid records skipped") {
		t.Errorf("--skip-bad: %v\n%s", err, out)
	}
	if _, err := runPrep(t, "sft", "--in", bad, "--out", dir, "--no-rewrite-ratio", "1.5"); err == nil || !strings.Contains(err.Error(), "no_rewrite_ratio") {
		t.Errorf("bad ratio: %v", err)
	}
}

// A prep that keeps no example used to write empty files and exit 0.
func TestPrepZeroExamplesIsAnError(t *testing.T) {
	dir := t.TempDir()
	// One turn without a reference answer (rl drops it) and with its rewrite
	// equal to the question but ratio 0 (sft drops identity examples).
	in := filepath.Join(dir, "in.jsonl")
	if err := os.WriteFile(in, []byte(`{"conv_id": "a", "turn": 1, "question": "who is he", "rewrite": "who is he"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"rl", "--in", in, "--out", filepath.Join(dir, "rl")},
		{"sft", "--in", in, "--out", filepath.Join(dir, "sft"), "--no-rewrite-ratio", "0"},
	} {
		_, err := runPrep(t, args...)
		if err == nil || !strings.Contains(err.Error(), "no examples from 1 input turns (dropped: ") || !strings.Contains(err.Error(), "nothing written") {
			t.Errorf("prep %s: %v", args[0], err)
		}
		if _, serr := os.Stat(args[4]); !os.IsNotExist(serr) {
			t.Errorf("prep %s wrote %s anyway", args[0], args[4])
		}
	}
}
