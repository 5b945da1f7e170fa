package rlcore

import (
	"testing"
)

// The rank term counts in the advantages only when reward.rank weighs it:
// two rollouts with equal HSER terms and rank rewards 2 (rank 1) and 0
// (nothing relevant) are a zero-variance group under HSER, and ±1 under
// reward.rank = 1 (rewards 2.5 and 0.5: mean 1.5, population std 1).
func TestAdvantageRankTerm(t *testing.T) {
	g := [][]SampleReward{{
		{Valid: true, Terms: Terms{RougeF1: 0.5, Rank: 2}},
		{Valid: true, Terms: Terms{RougeF1: 0.5, Rank: 0}},
	}}
	for _, agg := range []string{"sum", "normalize_then_sum"} {
		c := advCfg("group")
		c.Aggregation = agg
		a := mustAdv(t, c, Weights{}, g)
		advCheck(t, agg+" HSER", a.Values[0], []float64{0, 0})
		if a.Stats.ZeroVarGroups != 1 {
			t.Errorf("%s HSER: %d zero-variance groups, want 1", agg, a.Stats.ZeroVarGroups)
		}
		advCheck(t, agg+" rank=1", mustAdv(t, c, Weights{Rank: 1}, g).Values[0], []float64{1, -1})
	}
	if _, err := DefaultRegistry().ComputeAdvantages(advCfg("group"), Weights{Rank: -1}, g); err == nil {
		t.Error("a negative rank weight was accepted")
	}
}
