package grpo

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
	for _, c := range []struct {
		name string
		in   estimatorInput
		want []float64
	}{
		{EstimatorGroup, estimatorInput{}, []float64{-2 / pop, -1 / pop, 0, 3 / pop}},
		{EstimatorGroup, estimatorInput{sampleStd: true}, []float64{-2 / smp, -1 / smp, 0, 3 / smp}},
		{EstimatorGroup, estimatorInput{epsilon: 0.5}, []float64{-2 / (pop + 0.5), -1 / (pop + 0.5), 0, 3 / (pop + 0.5)}},
		// The batch's std (2 here) replaces the group's; ε is added to it.
		{EstimatorBatch, estimatorInput{batchStd: 2}, []float64{-1, -0.5, 0, 1.5}},
		{EstimatorBatch, estimatorInput{batchStd: 2, epsilon: 2}, []float64{-0.5, -0.25, 0, 0.75}},
		{EstimatorNone, estimatorInput{epsilon: 0.5, sampleStd: true}, []float64{-2, -1, 0, 3}},
		// 1 − (2+3+6)/3, 2 − 10/3, 3 − 3, 6 − 2.
		{EstimatorRLOO, estimatorInput{}, []float64{1 - 11.0/3, 2 - 10.0/3, 0, 4}},
	} {
		est, ok := estimators[c.name]
		if !ok {
			t.Fatalf("%s is not registered", c.name)
		}
		vals := []float64{1, 2, 3, 6}
		est.advantages(vals, c.in)
		for k := range vals {
			if !advNear(vals[k], c.want[k]) {
				t.Errorf("%s %+v: A = %v, want %v", c.name, c.in, vals, c.want)
				break
			}
		}
	}
	var names []string
	for n, e := range estimators {
		names = append(names, n)
		if e.usesBatchStd != (n == EstimatorBatch) {
			t.Errorf("%s: usesBatchStd %v", n, e.usesBatchStd)
		}
	}
	slices.Sort(names)
	if want := []string{EstimatorBatch, EstimatorGroup, EstimatorNone, EstimatorRLOO}; !slices.Equal(names, want) {
		t.Errorf("registry holds %v, want %v", names, want)
	}
}
