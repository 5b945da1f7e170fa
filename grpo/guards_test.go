package grpo

import (
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/rlcore"
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
		guard   string // the penalizing guards the record names
	}{
		{"when was the eiffel tower built", guardCounts{}, ""},
		{"when was the eiffel tower built in 1889", guardCounts{leak: 1}, "answer_leak"},
		{"   ", guardCounts{empty: 1}, "empty"},
		{"one two three four five six seven eight nine ten eleven twelve thirteen", guardCounts{tooLong: 1}, "too_long"},
		// Every distinct history word (case and punctuation ignored).
		{"tell me about the eiffel tower in paris it is a wrought iron lattice on champ de mars", guardCounts{copiesHistory: 1, tooLong: 1}, "too_long"},
	}
	for _, c := range cases {
		recs := []rollout.Record{{Rewrite: c.rewrite, Reward: 1.7, RougeP: 0.6, RougeR: 0.4, RougeF1: 0.48, EM: 1, Hit: 0, SquadF1: 0.9}}
		got := applyGuards(rlcore.DefaultRegistry(), cfg, newGuardTurn(cfg, turn), recs)
		if got != c.want {
			t.Errorf("%q: counts %+v, want %+v", c.rewrite, got, c.want)
		}
		// Default modes: leak, empty and too-long are penalized; copying
		// history is only flagged.
		r := recs[0]
		if r.Guard != c.guard {
			t.Errorf("%q: guard %q, want %q", c.rewrite, r.Guard, c.guard)
		}
		penalized := c.guard != ""
		if penalized && (r.Reward != cfg.Penalty || r.GuardPenalty != cfg.Penalty) {
			t.Errorf("%q: reward %v guard_penalty %v, want the penalty %v in both", c.rewrite, r.Reward, r.GuardPenalty, cfg.Penalty)
		}
		if !penalized && (r.Reward != 1.7 || r.GuardPenalty != 0) {
			t.Errorf("%q: reward changed to %v (guard_penalty %v)", c.rewrite, r.Reward, r.GuardPenalty)
		}
		// The terms stay the answer's real scores, penalized or not.
		if r.RougeP != 0.6 || r.RougeR != 0.4 || r.RougeF1 != 0.48 || r.EM != 1 || r.Hit != 0 || r.SquadF1 != 0.9 {
			t.Errorf("%q: terms overwritten: %+v", c.rewrite, r)
		}
	}
	// Two penalizing guards are both named.
	both := []rollout.Record{{Rewrite: "when was the eiffel tower built in 1889 one two three four five six"}}
	applyGuards(rlcore.DefaultRegistry(), cfg, newGuardTurn(cfg, turn), both)
	if both[0].Guard != "answer_leak,too_long" {
		t.Errorf("guard %q, want answer_leak,too_long", both[0].Guard)
	}
	// A question that already contains the answer is no leak.
	q := turn
	q.Question = "was it built in 1889"
	if got := applyGuards(rlcore.DefaultRegistry(), cfg, newGuardTurn(cfg, q), []rollout.Record{{Rewrite: "was the eiffel tower built in 1889"}}); got.leak != 0 {
		t.Errorf("answer present in the question counted as a leak")
	}
	// Failed rollouts are left alone.
	failed := []rollout.Record{{Rewrite: "", Error: "boom"}}
	if got := applyGuards(rlcore.DefaultRegistry(), cfg, newGuardTurn(cfg, turn), failed); got != (guardCounts{}) || failed[0].Reward != 0 {
		t.Errorf("guards touched a failed rollout")
	}
}
