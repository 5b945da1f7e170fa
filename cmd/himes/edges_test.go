package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// Item 11 of issue 27: an explicitly given empty data.eval ran with no
// evaluation and no best checkpoint, silently. It is refused, naming the file.
func TestTrainRefusesAnEmptyEvalFile(t *testing.T) {
	dir := t.TempDir()
	cfg := writeResumeConfig(t, dir)
	for name, content := range map[string]string{"empty": "", "blank lines": "\n\n"} {
		t.Run(name, func(t *testing.T) {
			eval := filepath.Join(dir, "eval-"+strings.ReplaceAll(name, " ", "-")+".jsonl")
			if err := os.WriteFile(eval, []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
			_, logs, err := runCLILogged(t, "train", "--config", cfg, "--set", "data.eval="+eval, "--set", "grpo.steps=1")
			if err == nil || !strings.Contains(err.Error(), "data.eval "+eval) || !strings.Contains(err.Error(), "no held-out turn") {
				t.Fatalf("got %v, want a refusal naming data.eval %s\n%s", err, eval, logs)
			}
			if _, err := os.Stat(filepath.Join(dir, "r")); err == nil {
				t.Fatal("the refused run left its directory behind")
			}
		})
	}
}

// Held-out turns from a conversation the run trains on are refused before
// anything loads further, naming the key and a shared conversation: data.eval
// set to the training file itself, and data.sft holding the conversations
// that data.eval_fraction holds out. Before, the run evaluated, and chose its
// best checkpoint, on its own training conversations.
func TestTrainRefusesHeldOutTurnsItTrainsOn(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	cfg := filepath.Join(root, "configs", "quickstart.yaml")
	train := filepath.Join(root, "datasets", "demo", "train.jsonl")
	for _, c := range []struct {
		sets []string
		want string
	}{
		{[]string{"data.eval=" + train}, "data.train and the held-out turns (data.eval " + train + ") share 32 conversations"},
		{[]string{"data.eval=", "data.sft=" + train}, "data.sft and the held-out turns (data.eval_fraction 0.2 of data.train) share"},
		{[]string{"data.dev_fraction=0.2", "data.sft=" + train}, "data.sft and the dev split (data.dev_fraction 0.2 of data.train) share"},
	} {
		out := t.TempDir()
		args := []string{"train", "--config", cfg, "--set", "run.output_dir=" + out}
		for _, s := range c.sets {
			args = append(args, "--set", s)
		}
		_, logs, err := runCLILogged(t, args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q\n%s", c.sets, err, c.want, logs)
		}
		if strings.Contains(logs, "BM25 ready") {
			t.Errorf("%v: refused only after the index was built", c.sets)
		}
	}
}
