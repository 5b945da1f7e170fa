package grpo

import (
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/rollout"
)

func TestGuards(t *testing.T) {
	turn := datasets.Turn{Question: "when was it built", Answer: "In 1889.",
		History: []datasets.Message{
			{Role: "user", Text: "Tell me about the Eiffel tower in Paris"},
			{Role: "assistant", Text: "It is a wrought-iron lattice tower on the Champ de Mars."},
		}}
	cfg := DefaultConfig().Guards
	cfg.MaxRewriteWords = 12
	cases := []struct {
		rewrite string
		want    guardCounts
	}{
		{"when was the eiffel tower built", guardCounts{}},
		{"when was the eiffel tower built in 1889", guardCounts{leak: 1}},
		{"   ", guardCounts{empty: 1}},
		{"one two three four five six seven eight nine ten eleven twelve thirteen", guardCounts{tooLong: 1}},
		// Every distinct history word (case and punctuation ignored).
		{"tell me about the eiffel tower in paris it is a wrought iron lattice on champ de mars", guardCounts{copiesHistory: 1, tooLong: 1}},
	}
	for _, c := range cases {
		recs := []rollout.Record{{Rewrite: c.rewrite, Reward: 0.5, RougeF1: 0.5}}
		got := applyGuards(cfg, turn, historyWords(turn.History), recs)
		if got != c.want {
			t.Errorf("%q: counts %+v, want %+v", c.rewrite, got, c.want)
		}
		// Default modes: leak, empty and too-long are penalized; copying
		// history is only flagged.
		penalized := c.want.leak+c.want.empty+c.want.tooLong > 0
		if penalized && recs[0].Reward != cfg.Penalty {
			t.Errorf("%q: reward %v, want penalty %v", c.rewrite, recs[0].Reward, cfg.Penalty)
		}
		if !penalized && recs[0].Reward != 0.5 {
			t.Errorf("%q: reward changed to %v", c.rewrite, recs[0].Reward)
		}
	}
	// A question that already contains the answer is no leak.
	q := turn
	q.Question = "was it built in 1889"
	if got := applyGuards(cfg, q, historyWords(q.History), []rollout.Record{{Rewrite: "was the eiffel tower built in 1889"}}); got.leak != 0 {
		t.Errorf("answer present in the question counted as a leak")
	}
	// Failed rollouts are left alone.
	failed := []rollout.Record{{Rewrite: "", Error: "boom"}}
	if got := applyGuards(cfg, turn, historyWords(turn.History), failed); got != (guardCounts{}) || failed[0].Reward != 0 {
		t.Errorf("guards touched a failed rollout")
	}
}
