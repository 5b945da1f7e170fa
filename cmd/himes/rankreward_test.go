package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// reward.rank > 0 on turns without relevance judgments is refused before
// the index is built, naming the turn; it is never trained on as rank 0.
func TestTrainRefusesRankRewardWithoutJudgments(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "unjudged.jsonl")
	rows := `{"conv_id":"u1","turn":1,"history":[],"question":"what is espresso","rewrite":null,"answer":"coffee","passages":[]}
{"conv_id":"u1","turn":2,"history":[],"question":"how is it brewed","rewrite":null,"answer":"under pressure","passages":[{"id":"p1"}]}
`
	if err := os.WriteFile(data, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	_, logs, err := runCLILogged(t, "train", "--config", "../../configs/quickstart.yaml", "--overwrite",
		"--set", "data.train="+data, "--set", "data.eval="+data, "--set", "reward.rank=1",
		"--set", "run.output_dir="+dir)
	if err == nil {
		t.Fatalf("trained with reward.rank on unjudged turns\n%s", logs)
	}
	for _, want := range []string{"reward.rank is 1", "2 of 4", "no relevance judgments", "u1#1"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if strings.Contains(logs, "BM25 ready") {
		t.Errorf("refused only after building the index:\n%s", logs)
	}
}
