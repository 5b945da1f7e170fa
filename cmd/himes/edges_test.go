package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
