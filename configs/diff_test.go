package configs

import (
	"strings"
	"testing"
)

func TestDiffListsChangedKeys(t *testing.T) {
	old := []byte(`run: {name: r, output_dir: /a, seed: 1}
grpo:
  group_size: 4
  learning_rate: 0.05
  loss: {type: grpo, clip_low: 0.2}
reward: {alpha: 1, beta: 1}
trainer: {token: s3cret}
data: {kb: x.jsonl}
retrieval: {memory: {hosts: [a, b]}}
`)
	neu := []byte(`run: {name: r, output_dir: /b, seed: 1}
grpo:
  group_size: 8
  learning_rate: 0.05
  loss: {type: grpo, clip_low: 0.3}
reward: {alpha: 0.5, beta: 1}
trainer: {token: other}
retrieval: {memory: {hosts: [a, c]}, k1: 0.9}
`)
	changes, err := Diff(old, neu, "run.output_dir")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range changes {
		got = append(got, c.String())
	}
	want := []string{
		"data.kb: x.jsonl → (absent)",
		"grpo.group_size: 4 → 8",
		"grpo.loss.clip_low: 0.2 → 0.3",
		"retrieval.k1: (absent) → 0.9",
		"retrieval.memory.hosts: [a, b] → [a, c]",
		"reward.alpha: 1 → 0.5",
		"trainer.token (changed; value not shown)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("changes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if same, err := Diff(old, old); err != nil || len(same) != 0 {
		t.Fatalf("a config against itself: %v %v", same, err)
	}
}
