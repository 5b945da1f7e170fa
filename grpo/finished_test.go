package grpo

import "testing"

// nothingLeft must agree with what Loop.run does from a checkpoint.
func TestNothingLeft(t *testing.T) {
	cfg := Config{Steps: 10, EvalEvery: 4}
	for _, c := range []struct {
		name string
		st   State
		cfg  Config
		want bool
	}{
		{"last step, evaluated", State{SFTDone: true, Step: 10, EvalDone: true}, cfg, true},
		{"last step, its evaluation missing", State{SFTDone: true, Step: 10}, cfg, false},
		{"past the last step", State{SFTDone: true, Step: 12, EvalDone: true}, cfg, true},
		{"past it, at an eval_every step not evaluated", State{SFTDone: true, Step: 12}, cfg, false},
		{"past it, no evaluation due", State{SFTDone: true, Step: 11}, cfg, true},
		{"steps left", State{SFTDone: true, Step: 9, EvalDone: true}, cfg, false},
		{"SFT only, evaluated", State{SFTDone: true, Step: 0, EvalDone: true}, Config{}, true},
		{"SFT only, not evaluated", State{SFTDone: true, Step: 0}, Config{}, false},
		{"SFT not done", State{Step: 10, EvalDone: true}, cfg, false},
	} {
		if got := c.cfg.nothingLeft(c.st); got != c.want {
			t.Errorf("%s: nothingLeft = %v, want %v", c.name, got, c.want)
		}
	}
}
