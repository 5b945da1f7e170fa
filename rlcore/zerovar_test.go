package rlcore

import (
	"testing"
)

// Dynamic sampling and the advantage statistics share one definition of a
// group that teaches nothing. Two rollouts trading Rouge-L against EM with
// α = 1 have equal totals (1 + 0 = 0 + 1): flat under
// "sum", informative under "normalize_then_sum".
func TestTeachesNothingFollowsAggregation(t *testing.T) {
	w := Weights{Alpha: 1, Beta: 0}
	trade := []SampleReward{
		{Valid: true, Terms: Terms{RougeF1: 1, EM: 0}},
		{Valid: true, Terms: Terms{RougeF1: 0, EM: 1}},
	}
	sum := DefaultAdvantageConfig()
	nts := DefaultAdvantageConfig()
	nts.Aggregation = "normalize_then_sum"
	if !TeachesNothing(sum, w, trade) {
		t.Error(`"sum": equal totals should teach nothing`)
	}
	if TeachesNothing(nts, w, trade) {
		t.Error(`"normalize_then_sum": opposite terms should teach something`)
	}
	for _, cfg := range []AdvantageConfig{sum, nts} {
		a := mustAdv(t, cfg, w, [][]SampleReward{trade})
		flat := a.Stats.ZeroVarGroups == 1
		if flat != TeachesNothing(cfg, w, trade) {
			t.Errorf("%s: ComputeAdvantages counts zero variance %v, teachesNothing says %v", cfg.Aggregation, flat, !flat)
		}
	}
	// One valid rollout (the other failed) has nothing to compare with.
	lone := []SampleReward{{Valid: true, Terms: Terms{RougeF1: 1}}, {Valid: false, Terms: Terms{RougeF1: 0}}}
	if !TeachesNothing(nts, w, lone) {
		t.Error("a group with one valid rollout should teach nothing")
	}
}
