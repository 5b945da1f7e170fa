package rlcore

import (
	"math"
	"strings"
	"testing"
)

func greedyAdv(t *testing.T, cfg AdvantageConfig, w Weights, groups [][]SampleReward, greedy []SampleReward) Advantages {
	t.Helper()
	a, err := DefaultRegistry().ComputeAdvantagesGreedy(cfg, w, groups, greedy)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestGreedyBaselineByHand: each sample's reward minus its group's greedy
// reward (SCST / ReMax), worked out by hand, with the cases the group-mean
// estimators treat differently.
func TestGreedyBaselineByHand(t *testing.T) {
	w := Weights{Alpha: 1, Beta: 1}
	// R = F1 + EM + Hit.
	g0 := []SampleReward{
		{Valid: true, Terms: Terms{RougeF1: 0.5, Hit: 1}}, // 1.5
		{Valid: true, Terms: Terms{RougeF1: 0.25}},        // 0.25
		{Valid: false, Terms: Terms{RougeF1: 9}},          // failed: left out
		{Valid: true, Terms: Terms{RougeF1: 1, EM: 1}},    // 2
	}
	greedy0 := SampleReward{Valid: true, Terms: Terms{RougeF1: 0.5}} // 0.5
	// Every sample ties, but below the greedy rewrite: still a signal
	// (every sample is pushed down), not a zero-variance group.
	g1 := advRewards(0.2, 0.2)
	greedy1 := SampleReward{Valid: true, Terms: Terms{RougeF1: 0.7}}
	// One valid sample is enough to compare with greedy.
	g2 := []SampleReward{{Valid: false}, {Valid: true, Terms: Terms{RougeF1: 0.9}}}
	greedy2 := SampleReward{Valid: true, Terms: Terms{RougeF1: 0.4}}
	// Samples equal to greedy: zero variance, advantage exactly 0.
	g3 := advRewards(0.6, 0.6)
	greedy3 := SampleReward{Valid: true, Terms: Terms{RougeF1: 0.6}}
	// A failed greedy rollout: nothing to compare with, the group is dropped.
	g4 := advRewards(0.1, 0.8)
	greedy4 := SampleReward{Valid: false}
	// A guarded greedy rollout counts its penalty.
	g5 := advRewards(0.1, 0.8)
	greedy5 := SampleReward{Valid: true, Guarded: true, GuardPenalty: -1, Terms: Terms{RougeF1: 0.9}}

	a := greedyAdv(t, advCfg(EstimatorGreedy), w,
		[][]SampleReward{g0, g1, g2, g3, g4, g5},
		[]SampleReward{greedy0, greedy1, greedy2, greedy3, greedy4, greedy5})
	advCheck(t, "g0", a.Values[0], []float64{1, -0.25, 0, 1.5})
	advCheck(t, "g1", a.Values[1], []float64{-0.5, -0.5})
	advCheck(t, "g2", a.Values[2], []float64{0, 0.5})
	advCheck(t, "g5", a.Values[5], []float64{1.1, 1.8})
	wantInclude := [][]bool{{true, true, false, true}, {true, true}, {false, true}, {true, true}, {false, false}, {true, true}}
	for g := range wantInclude {
		for i, inc := range wantInclude[g] {
			if a.Include[g][i] != inc {
				t.Errorf("group %d rollout %d: included %v, want %v", g, i, a.Include[g][i], inc)
			}
		}
	}
	if a.Values[3][0] != 0 || a.Values[3][1] != 0 {
		t.Errorf("samples equal to greedy: %v, want exact zeros", a.Values[3])
	}
	st := a.Stats
	if st.Groups != 6 || st.DroppedGroups != 1 || st.ComparableGroups != 5 || st.ZeroVarGroups != 1 || st.FailedRollouts != 2 {
		t.Errorf("stats %+v", st)
	}
}

// TestGreedyBaselinePerTerm: with sum_of_normalized each term is compared
// with the greedy rollout's same term, and a term constant over samples
// and greedy contributes exactly 0.
func TestGreedyBaselinePerTerm(t *testing.T) {
	c := advCfg(EstimatorGreedy)
	c.Aggregation = "sum_of_normalized"
	g := []SampleReward{
		{Valid: true, Terms: Terms{RougeF1: 0.5, EM: 1, Hit: 1}},
		{Valid: true, Terms: Terms{RougeF1: 0.2, EM: 0, Hit: 1}},
	}
	greedy := SampleReward{Valid: true, Terms: Terms{RougeF1: 0.3, EM: 0, Hit: 1}}
	a := greedyAdv(t, c, Weights{Alpha: 2, Beta: 5}, [][]SampleReward{g}, []SampleReward{greedy})
	// F1: +0.2, −0.1; EM (α 2): +1·2, 0; Hit constant with greedy: 0.
	advCheck(t, "per term", a.Values[0], []float64{0.2 + 2, -0.1})
}

// TestGreedyBaselineOtherEstimatorsIgnoreIt: a group-mean estimator gives
// the same bits with or without greedy rollouts.
func TestGreedyBaselineOtherEstimatorsIgnoreIt(t *testing.T) {
	groups := [][]SampleReward{advRewards(0.1, 0.5, 0.9), advRewards(0.3, 0.3)}
	greedy := []SampleReward{{Valid: true, Terms: Terms{RougeF1: 7}}, {Valid: false}}
	for _, est := range []string{EstimatorGroup, EstimatorBatch, EstimatorNone, EstimatorRLOO} {
		a := mustAdv(t, advCfg(est), Weights{}, groups)
		b := greedyAdv(t, advCfg(est), Weights{}, groups, greedy)
		for g := range groups {
			for i := range groups[g] {
				if a.Values[g][i] != b.Values[g][i] || a.Include[g][i] != b.Include[g][i] {
					t.Errorf("%s: group %d rollout %d: %v/%v with greedy, %v/%v without", est, g, i, b.Values[g][i], b.Include[g][i], a.Values[g][i], a.Include[g][i])
				}
			}
		}
		if a.Stats != b.Stats {
			t.Errorf("%s: stats %+v with greedy, %+v without", est, b.Stats, a.Stats)
		}
	}
}

func TestGreedyBaselineErrors(t *testing.T) {
	groups := [][]SampleReward{advRewards(0, 1), advRewards(1, 2)}
	_, err := DefaultRegistry().ComputeAdvantages(advCfg(EstimatorGreedy), Weights{}, groups)
	if err == nil || !strings.Contains(err.Error(), "0 greedy rollouts for 2 groups") {
		t.Errorf("greedy estimator without greedy rollouts: %v", err)
	}
	bad := []SampleReward{{Valid: true}, {Valid: true, Terms: Terms{Hit: math.NaN()}}}
	_, err = DefaultRegistry().ComputeAdvantagesGreedy(advCfg(EstimatorGreedy), Weights{}, groups, bad)
	if err == nil || !strings.Contains(err.Error(), "greedy rollout of group 1") {
		t.Errorf("NaN greedy term: %v", err)
	}
}
