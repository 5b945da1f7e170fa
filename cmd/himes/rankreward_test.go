package main

import (
	"os"
	"path/filepath"
	"regexp"
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
	eval := heldOutTwin(t, dir, rows)
	_, logs, err := runCLILogged(t, "train", "--config", "../../configs/quickstart.yaml", "--overwrite",
		"--set", "data.train="+data, "--set", "data.eval="+eval, "--set", "reward.rank=1",
		"--set", "data.judged_only=false", "--set", "run.output_dir="+dir)
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

// data.judged_only makes the same data trainable with reward.rank: only the
// judged turn is a prompt and a held-out turn, and the unjudged one is left
// out of both (its rollouts would fail as unjudged otherwise).
func TestTrainJudgedOnlyTrainsRankRewardOnJudgedTurns(t *testing.T) {
	dir := t.TempDir()
	data := filepath.Join(dir, "half-judged.jsonl")
	rows := `{"conv_id":"u1","turn":1,"history":[],"question":"what is the eiffel tower","rewrite":null,"answer":"a tower in paris","passages":[]}
{"conv_id":"u1","turn":2,"history":[{"role":"user","text":"what is the eiffel tower"}],"question":"how tall is it","rewrite":null,"answer":"330 metres","passages":[{"id":"p1"}]}
`
	kb := filepath.Join(dir, "kb.jsonl")
	if err := os.WriteFile(kb, []byte(`{"id":"p1","text":"The Eiffel Tower in Paris is 330 metres tall."}
{"id":"p2","text":"Espresso is coffee brewed under pressure."}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(data, []byte(rows), 0o644); err != nil {
		t.Fatal(err)
	}
	eval := heldOutTwin(t, dir, rows)
	_, logs, err := runCLILogged(t, "train", "--config", "../../configs/quickstart.yaml", "--overwrite",
		"--set", "data.train="+data, "--set", "data.eval="+eval, "--set", "data.kb="+kb, "--set", "reward.rank=1",
		"--set", "data.judged_only=true", "--set", "grpo.steps=2", "--set", "grpo.prompts_per_step=1",
		"--set", "grpo.group_size=2", "--set", "run.output_dir="+dir)
	if err != nil {
		t.Fatalf("judged_only with reward.rank: %v\n%s", err, logs)
	}
	if !strings.Contains(logs, "judged turns only") || !strings.Contains(logs, "prompts=1") || !strings.Contains(logs, "held_out=1") {
		t.Errorf("want 1 prompt and 1 held-out turn logged:\n%s", logs)
	}
	// Durations are logged in seconds to the millisecond, in their shortest
	// form ("2.728", not the 2.7279999999999998 that Duration.Seconds of a
	// rounded duration can give).
	elapsed := regexp.MustCompile(`elapsed_s=(\S+)`).FindAllStringSubmatch(logs, -1)
	if len(elapsed) < 2 {
		t.Fatalf("want the index's and the run's elapsed_s logged:\n%s", logs)
	}
	millis := regexp.MustCompile(`^\d+(\.\d{1,3})?$`)
	for _, m := range elapsed {
		if !millis.MatchString(m[1]) {
			t.Errorf("elapsed_s=%s: want seconds with at most 3 decimals", m[1])
		}
	}
}

// heldOutTwin writes rows as another conversation (u2 for u1) into
// dir/heldout.jsonl: held-out turns may not share a conversation with the
// training data.
func heldOutTwin(t *testing.T, dir, rows string) string {
	t.Helper()
	p := filepath.Join(dir, "heldout.jsonl")
	if err := os.WriteFile(p, []byte(strings.ReplaceAll(rows, `"conv_id":"u1"`, `"conv_id":"u2"`)), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
