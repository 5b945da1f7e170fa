package rlcore

import (
	"math"
	"slices"
	"testing"
)

// TestEstimatorsByHand runs each registered estimator on the values 1, 2,
// 3, 6 (mean 3; population std √3.5, sample std √(14/3)) against values
// worked out by hand, and checks that the registry holds exactly the named
// estimators.
func TestEstimatorsByHand(t *testing.T) {
	pop, smp := math.Sqrt(3.5), math.Sqrt(14.0/3)
	reg := DefaultRegistry()
	for _, c := range []struct {
		name string
		in   EstimatorInput
		want []float64
	}{
		{EstimatorGroup, EstimatorInput{}, []float64{-2 / pop, -1 / pop, 0, 3 / pop}},
		{EstimatorGroup, EstimatorInput{SampleStd: true}, []float64{-2 / smp, -1 / smp, 0, 3 / smp}},
		{EstimatorGroup, EstimatorInput{Epsilon: 0.5}, []float64{-2 / (pop + 0.5), -1 / (pop + 0.5), 0, 3 / (pop + 0.5)}},
		// The batch's std (2 here) replaces the group's; ε is added to it.
		{EstimatorBatch, EstimatorInput{BatchStd: 2}, []float64{-1, -0.5, 0, 1.5}},
		{EstimatorBatch, EstimatorInput{BatchStd: 2, Epsilon: 2}, []float64{-0.5, -0.25, 0, 0.75}},
		{EstimatorNone, EstimatorInput{Epsilon: 0.5, SampleStd: true}, []float64{-2, -1, 0, 3}},
		// 1 − (2+3+6)/3, 2 − 10/3, 3 − 3, 6 − 2.
		{EstimatorRLOO, EstimatorInput{}, []float64{1 - 11.0/3, 2 - 10.0/3, 0, 4}},
		// The greedy rollout's value (2.5 here) is the baseline; no scaling.
		{EstimatorGreedy, EstimatorInput{Greedy: 2.5, Epsilon: 0.5, SampleStd: true}, []float64{-1.5, -0.5, 0.5, 3.5}},
	} {
		est, err := reg.AdvantageEstimator(c.name)
		if err != nil {
			t.Fatalf("%s is not registered: %v", c.name, err)
		}
		vals := []float64{1, 2, 3, 6}
		est.Fn(vals, c.in)
		for k := range vals {
			if !advNear(vals[k], c.want[k]) {
				t.Errorf("%s %+v: A = %v, want %v", c.name, c.in, vals, c.want)
				break
			}
		}
	}
	names := reg.AdvantageEstimators()
	for _, n := range names {
		if e, _ := reg.AdvantageEstimator(n); e.UsesBatchStd != (n == EstimatorBatch) || e.UsesGreedy != (n == EstimatorGreedy) {
			t.Errorf("%s: UsesBatchStd %v, UsesGreedy %v", n, e.UsesBatchStd, e.UsesGreedy)
		}
	}
	if want := []string{EstimatorBatch, EstimatorGreedy, EstimatorGroup, EstimatorNone, EstimatorRLOO}; !slices.Equal(names, want) {
		t.Errorf("registry holds %v, want %v", names, want)
	}
}
