package configs

import (
	"os"
	"path/filepath"
	"testing"
)

func TestResumeChangesSplitsWhatAStepComputes(t *testing.T) {
	saved := []byte("run:\n  output_dir: a\ngrpo:\n  steps: 10\n  group_size: 8\ntrainer:\n  endpoint: http://127.0.0.1:4001\n")
	launched := []byte("trainer:\n  endpoint: launch\n  launch:\n    args: [--a]\n")
	if b, _, err := ResumeChanges(launched, []byte("trainer:\n  endpoint: launch\n  launch:\n    args: [--b]\n")); err != nil || len(b) != 1 || b[0].Key != "trainer.launch.args" {
		t.Errorf("launched trainer with other args: blocking %v, %v; want trainer.launch.args", b, err)
	}
	cases := []struct {
		name, now       string
		blocking, free  int
		blockingKeyWant string
	}{
		{"same", string(saved), 0, 0, ""},
		{"more steps, another place", "run:\n  output_dir: b\ngrpo:\n  steps: 20\n  group_size: 8\ntrainer:\n  endpoint: http://127.0.0.1:4001\n", 0, 2, ""},
		{"trainer on another port", "run:\n  output_dir: a\ngrpo:\n  steps: 10\n  group_size: 8\ntrainer:\n  endpoint: http://127.0.0.1:5002\n", 0, 1, ""},
		{"a trainer URL becomes the embedded policy", "run:\n  output_dir: a\ngrpo:\n  steps: 10\n  group_size: 8\ntrainer:\n  endpoint: embedded\n", 1, 0, "trainer.endpoint"},
		{"a key this run's himes did not have, at its default", string(saved) + "retrieval:\n  memory:\n    sources: all\n", 0, 1, ""},
		{"a key this run's himes did not have, not at its default", string(saved) + "retrieval:\n  memory:\n    sources: facts\n", 1, 0, "retrieval.memory.sources"},
		{"the launch section, unused with a trainer URL", string(saved) + "  launch:\n    args: [--x]\n", 0, 1, ""},
		{"another group size", "run:\n  output_dir: a\ngrpo:\n  steps: 10\n  group_size: 4\ntrainer:\n  endpoint: http://127.0.0.1:4001\n", 1, 0, "grpo.group_size"},
	}
	for _, c := range cases {
		b, f, err := ResumeChanges(saved, []byte(c.now))
		if err != nil {
			t.Fatal(err)
		}
		if len(b) != c.blocking || len(f) != c.free {
			t.Errorf("%s: blocking %v, free %v; want %d and %d", c.name, b, f, c.blocking, c.free)
		}
		if c.blockingKeyWant != "" && (len(b) == 0 || b[0].Key != c.blockingKeyWant) {
			t.Errorf("%s: blocking %v, want %s", c.name, b, c.blockingKeyWant)
		}
	}
}

func TestLatestSnapshotIsTheNewestResume(t *testing.T) {
	dir := t.TempDir()
	if p, err := LatestSnapshot(dir); err != nil || filepath.Base(p) != "config.yaml" {
		t.Errorf("no resume: %s, %v", p, err)
	}
	for _, n := range []string{"config.yaml", "config.resume-2.yaml", "config.resume-10.yaml", "config.resume-x.yaml"} {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if p, err := LatestSnapshot(dir); err != nil || filepath.Base(p) != "config.resume-10.yaml" {
		t.Errorf("got %s, %v; want config.resume-10.yaml (10 > 2 as numbers)", p, err)
	}
}
