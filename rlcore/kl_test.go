package rlcore

import (
	"math"
	"testing"
)

// TestKLEstimatorsByHand: k3 and low_var_kl at hand-computed points
// (d = log π_ref − log π).
func TestKLEstimatorsByHand(t *testing.T) {
	e := math.E
	for _, c := range []struct {
		name    string
		d       float64
		kl, dkl float64
	}{
		{KLK3, 0, 0, 0},
		{KLK3, 1, e - 2, 1 - e},
		{KLK3, -1, 1 / e, 1 - 1/e},
		{KLLowVar, 1, e - 2, 1 - e},
		// exp(3) − 4 ≈ 16.09 is above 10: clamped, no gradient.
		{KLLowVar, 3, 10, 0},
		// d = −25 is clamped to −20: exp(−20) + 19, then to 10.
		{KLLowVar, -25, 10, 0},
		// d = −5: exp(−5) + 4 ≈ 4.0067, inside both clamps.
		{KLLowVar, -5, math.Exp(-5) + 4, 1 - math.Exp(-5)},
	} {
		f, err := DefaultRegistry().KLEstimator(c.name)
		if err != nil {
			t.Fatal(err)
		}
		kl, dkl := f(c.d)
		if math.Abs(kl-c.kl) > 1e-12 || math.Abs(dkl-c.dkl) > 1e-12 {
			t.Errorf("%s(%v) = %v, %v; want %v, %v", c.name, c.d, kl, dkl, c.kl, c.dkl)
		}
	}
}
