package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// A command whose --config is optional applies --set to the defaults when
// no --config is given. Before, search, score, prep, memory, export --verify
// and trainer serve registered --set but read it only with --config: the
// override was dropped without a word and the command ran on the defaults.
func TestSetWithoutConfigIsApplied(t *testing.T) {
	root := sharedtest.RepoRoot(t)
	kb := filepath.Join(root, "datasets", "demo", "passages.jsonl")

	// search: top_k 2 instead of the default 3.
	out, err := runCLI(t, "search", "--kb", kb, "--set", "retrieval.top_k=2", "--json", "garage door opener")
	if err != nil {
		t.Fatal(err)
	}
	var res searchJSON
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Chunks) != 2 {
		t.Errorf("search --set retrieval.top_k=2: %d chunks", len(res.Chunks))
	}

	// score: α = 0 leaves Rouge-L F1 (1) + β·hit (0) of an exact answer.
	dir := t.TempDir()
	in := filepath.Join(dir, "p.jsonl")
	if err := os.WriteFile(in, []byte(`{"prediction":"blue whale","reference":"blue whale"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = runCLI(t, "score", in, "--set", "reward.alpha=0")
	if err != nil {
		t.Fatal(err)
	}
	var sc struct{ Alpha, Reward float64 }
	if err := json.Unmarshal([]byte(out), &sc); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if sc.Alpha != 0 || sc.Reward != 1 {
		t.Errorf("score --set reward.alpha=0: alpha %v, reward %v; want 0 and 1", sc.Alpha, sc.Reward)
	}

	// prep: every conversation but none held out with val_fraction 0; a
	// bad value is refused naming the key, not ignored.
	conv := filepath.Join(root, "datasets", "demo", "train.jsonl")
	if _, err := runCLI(t, "prep", "sft", "--in", conv, "--out", filepath.Join(dir, "sft"), "--set", "data.prep.val_fraction=0"); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join(dir, "sft", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	var sum struct {
		Prep struct {
			ValFraction *float64 `json:"val_fraction"`
		} `json:"prep"`
		Stats struct{ Train, Validation int } `json:"stats"`
	}
	if err := json.Unmarshal(raw, &sum); err != nil || sum.Prep.ValFraction == nil || *sum.Prep.ValFraction != 0 ||
		sum.Stats.Validation != 0 || sum.Stats.Train == 0 {
		t.Errorf("prep sft --set data.prep.val_fraction=0: %s (%v)", raw, err)
	}
	_, err = runCLI(t, "prep", "sft", "--in", conv, "--out", filepath.Join(dir, "bad"), "--set", "data.prep.val_fraction=2")
	if err == nil || !strings.Contains(err.Error(), "val_fraction") {
		t.Errorf("prep --set data.prep.val_fraction=2: got %v", err)
	}

	// Unknown keys are refused without --config too.
	if _, err := runCLI(t, "search", "--kb", kb, "--set", "retrieval.topk=2", "q"); err == nil || !strings.Contains(err.Error(), "retrieval.topk") {
		t.Errorf("search --set retrieval.topk=2: got %v", err)
	}
}
