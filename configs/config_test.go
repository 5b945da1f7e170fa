package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeConfig writes a config and an empty data file beside it, so the file
// checks pass unless a test wants them to fail.
func writeConfig(t *testing.T, body string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "train.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

const valid = `run:
  name: test
data:
  train: train.jsonl
grpo:
  group_size: 4
reward:
  alpha: 0.5
`

func TestLoadValid(t *testing.T) {
	p := writeConfig(t, valid)
	cfg, err := Load(p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPO.GroupSize != 4 || cfg.Reward.Alpha != 0.5 {
		t.Fatalf("file values not applied: %+v %+v", cfg.GRPO, cfg.Reward)
	}
	// Keys absent from the file keep the package defaults.
	if cfg.Reward.Beta != 1 || cfg.Retrieval.K1 != 0.9 || cfg.GRPO.Advantage.Estimator != "group" {
		t.Fatalf("defaults lost: beta=%v k1=%v est=%q", cfg.Reward.Beta, cfg.Retrieval.K1, cfg.GRPO.Advantage.Estimator)
	}
	// Relative data paths resolve against the config file's directory.
	if want, _ := filepath.Abs(filepath.Join(filepath.Dir(p), "train.jsonl")); cfg.Data.Train != want {
		t.Fatalf("data.train = %q, want %q", cfg.Data.Train, want)
	}
}

func TestLoadErrors(t *testing.T) {
	cases := []struct {
		name, body string
		sets       []string
		want       []string // substrings of the error
	}{
		{"misspelled key", strings.Replace(valid, "group_size", "grop_size", 1), nil,
			[]string{"run.yaml", "line 6", `unknown key "grop_size"`}},
		{"wrong type", strings.Replace(valid, "group_size: 4", "group_size: four", 1), nil,
			[]string{"run.yaml", "line 6", "four"}},
		{"out of range", strings.Replace(valid, "group_size: 4", "group_size: 1", 1), nil,
			[]string{"run.yaml:6", "grpo.group_size", "≥ 2"}},
		{"negative weight", strings.Replace(valid, "alpha: 0.5", "alpha: -1", 1), nil,
			[]string{"run.yaml:8", "reward.alpha"}},
		{"missing file", strings.Replace(valid, "train.jsonl", "nope.jsonl", 1), nil,
			[]string{"run.yaml:4", "data.train", "nope.jsonl"}},
		{"bad override key", valid, []string{"grpo.groupsize=8"},
			[]string{"--set grpo.groupsize=8", `unknown key "groupsize"`}},
		{"bad override value", valid, []string{"grpo.group_size=x"},
			[]string{"--set grpo.group_size=x"}},
		{"override out of range", valid, []string{"grpo.advantage.epsilon=-1"},
			[]string{"grpo.advantage.epsilon", "≥ 0"}},
		{"override without =", valid, []string{"grpo.group_size"},
			[]string{"want key=value"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeConfig(t, c.body), c.sets)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

func TestOverrideNestedKey(t *testing.T) {
	cfg, err := Load(writeConfig(t, valid), []string{
		"grpo.group_size=8", "reward.alpha=0.25", "grpo.advantage.estimator=rloo", "retrieval.memory.enabled=true",
	})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.GRPO.GroupSize != 8 || cfg.Reward.Alpha != 0.25 || cfg.GRPO.Advantage.Estimator != "rloo" || !cfg.Retrieval.Memory.Enabled {
		t.Fatalf("overrides not applied: %+v", cfg.GRPO)
	}
	// Siblings of an overridden key are untouched.
	if cfg.GRPO.Advantage.Std != "population" || cfg.Reward.Beta != 1 {
		t.Fatalf("override clobbered siblings: %+v %+v", cfg.GRPO.Advantage, cfg.Reward)
	}
}

func TestOverrideErrorHasNoStaleLine(t *testing.T) {
	// An out-of-range value from --set must not point at the file line of the
	// value it replaced.
	_, err := Load(writeConfig(t, valid), []string{"grpo.group_size=1"})
	if err == nil || strings.Contains(err.Error(), ":6:") {
		t.Fatalf("got %v", err)
	}
}

func TestShippedConfigsLoad(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) == 0 {
		t.Skip("no shipped configs yet")
	}
	for _, f := range files {
		if _, err := Load(f, nil); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}
