package stats

import (
	"math"
	"slices"
	"testing"
)

// Worked by hand.
//
// x = (1, 2, 3, 4), y = (1, 3, 2, 4): rank differences d = (0, 1, −1, 0),
// Σd² = 2, ρ = 1 − 6·2/(4·15) = 0.8; τ-b: 6 pairs, one discordant (2,3):
// (5 − 1)/6 = 2/3.
//
// x = (0, 1, 1), y = (1, 2, 3): ranks of x (1, 2.5, 2.5), of y (1, 2, 3);
// centred (−1, 0.5, 0.5) and (−1, 0, 1): Σ = 1.5, |x| = √1.5, |y| = √2,
// ρ = 1.5/√3 = √3/2. τ-b: pairs (1,2) and (1,3) concordant, (2,3) tied in
// x: (2 − 0)/√(2·3) = 2/√6.
func TestSpearmanHandComputed(t *testing.T) {
	for _, c := range []struct {
		x, y     []float64
		rho, tau float64
	}{
		{[]float64{1, 2, 3, 4}, []float64{1, 3, 2, 4}, 0.8, 2.0 / 3},
		{[]float64{0, 1, 1}, []float64{1, 2, 3}, math.Sqrt(3) / 2, 2 / math.Sqrt(6)},
		{[]float64{3, 2, 1}, []float64{10, 20, 30}, -1, -1},
	} {
		rho, ok, err := Spearman(c.x, c.y)
		if err != nil || !ok || math.Abs(rho-c.rho) > 1e-12 {
			t.Errorf("Spearman(%v, %v) = %v, %v, %v; want %v", c.x, c.y, rho, ok, err, c.rho)
		}
		tau, ok, err := KendallTauB(c.x, c.y)
		if err != nil || !ok || math.Abs(tau-c.tau) > 1e-12 {
			t.Errorf("KendallTauB(%v, %v) = %v, %v, %v; want %v", c.x, c.y, tau, ok, err, c.tau)
		}
	}
	if _, ok, _ := Spearman([]float64{1, 1, 1}, []float64{1, 2, 3}); ok {
		t.Error("ρ of a constant side is defined")
	}
	if _, _, err := Spearman([]float64{1}, []float64{1, 2}); err == nil {
		t.Error("lengths differ: no error")
	}
	if got := Ranks([]float64{5, 1, 5, 3}); !slices.Equal(got, []float64{3.5, 1, 3.5, 2}) {
		t.Errorf("Ranks = %v, want [3.5 1 3.5 2]", got)
	}
}
