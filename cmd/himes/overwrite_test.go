package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// An output that is one of the command's inputs (or a folder that holds
// one) is refused before anything is written, and the input is left as it
// was. Before, `prep queries --in d.jsonl --out d.jsonl` replaced the
// conversations with their queries.
func TestOutputOverAnInputIsRefused(t *testing.T) {
	demo := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	dir := t.TempDir()
	in := filepath.Join(dir, "d.jsonl")
	raw := demoCopy(t, "eval.jsonl", in)
	link := filepath.Join(dir, "link.jsonl")
	if err := os.Symlink(in, link); err != nil {
		t.Fatal(err)
	}
	// Inputs where prep rl and prep sft write their outputs.
	rlIn := filepath.Join(dir, "train.jsonl")
	sftIn := filepath.Join(dir, "examples", "train.jsonl")
	for _, p := range []string{rlIn, sftIn} {
		demoCopy(t, "eval.jsonl", p)
	}
	kb := filepath.Join(demo, "passages.jsonl")
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"prep", "queries", "--in", in, "--out", in}, "--out " + in + " is the input"},
		{[]string{"prep", "queries", "--in", in, "--out", link}, "is the input"},
		{[]string{"prep", "rl", "--in", rlIn, "--out", dir}, "--out " + dir + " would write " + rlIn + ", which is the input " + rlIn},
		{[]string{"prep", "sft", "--in", sftIn, "--out", dir}, "would write " + sftIn + ", which is the input"},
		{[]string{"memory", "build", "--from", in, "--out", in}, "--out " + in + " is the input"},
		{[]string{"search", "--kb", kb, "--queries", in, "--trec-run", in}, "--trec-run " + in + " is the input"},
	} {
		_, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: got %v, want %q", c.args, err, c.want)
		}
		for _, p := range []string{in, rlIn, sftIn} {
			if got, _ := os.ReadFile(p); string(got) != string(raw) {
				t.Fatalf("%v: the input %s was changed", c.args, p)
			}
		}
	}
	// An input in the --out folder that prep does not write is fine.
	if _, err := runCLI(t, "prep", "sft", "--in", in, "--out", dir); err != nil {
		t.Errorf("prep sft beside its input: %v", err)
	}
	// An eval folder is replaced whole: data kept in one would be deleted.
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	ev := filepath.Join(dir, "ev")
	if _, err := runCLI(t, "eval", "--config", cfg, "--rewriter", "raw", "--limit", "1", "--resamples", "40", "--out", ev); err != nil {
		t.Fatal(err)
	}
	kept := filepath.Join(ev, "mine.jsonl")
	demoCopy(t, "eval.jsonl", kept)
	_, err := runCLI(t, "eval", "--config", cfg, "--rewriter", "raw", "--data", kept, "--out", ev)
	if err == nil || !strings.Contains(err.Error(), "--out "+ev+" holds the input") {
		t.Errorf("eval --data inside --out: got %v", err)
	}
	if got, _ := os.ReadFile(kept); string(got) != string(raw) {
		t.Errorf("eval deleted or changed its --data file")
	}
	// A different output file beside the input is fine.
	if _, err := runCLI(t, "prep", "queries", "--in", in, "--out", filepath.Join(dir, "q.jsonl")); err != nil {
		t.Errorf("prep queries beside the input: %v", err)
	}
}

// eval --data on conversations of the config's own training data says so in
// summary.md and summary.json (training_conversations); on held-out ones it
// says nothing.
func TestEvalOnTrainingConversationsIsLabelled(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	cfg := filepath.Join(root, "configs", "quickstart.yaml")
	for file, want := range map[string]int{"train.jsonl": 2, "eval.jsonl": 0} {
		out := filepath.Join(t.TempDir(), "ev")
		stdout, err := runCLI(t, "eval", "--config", cfg, "--rewriter", "raw", "--limit", "2", "--resamples", "40",
			"--data", filepath.Join(root, "datasets", "demo", file), "--out", out)
		if err != nil {
			t.Fatal(err)
		}
		md, _ := os.ReadFile(filepath.Join(out, "summary.md"))
		raw, _ := os.ReadFile(filepath.Join(out, "summary.json"))
		note := fmt.Sprintf("Not held out: %d of the 2 conversations are in the run's training data", want)
		if got := strings.Contains(string(md), note) && strings.Contains(stdout, note); got != (want > 0) {
			t.Errorf("%s: note %q in summary.md and stdout: %v\n%s", file, note, got, md)
		}
		if got := strings.Contains(string(raw), fmt.Sprintf(`"training_conversations": %d`, want)); got != (want > 0) {
			t.Errorf("%s: training_conversations %d in summary.json: %v", file, want, got)
		}
	}
}

// demoCopy copies the demo data file name to dst (creating its folder) and
// returns its bytes.
func demoCopy(t *testing.T, name, dst string) []byte {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	return raw
}
