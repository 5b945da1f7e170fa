package stats

import (
	"math"
	"testing"
)

// Against the t table: t_{.975, 2} = 4.303, t_{.975, 4} = 2.776.
func TestTIntervalByHand(t *testing.T) {
	s := TInterval([]float64{0.5, 0.6, 0.7}, 0.95)
	// mean .6, sd .1, half-width 4.303 · .1/√3 = 0.24843.
	if math.Abs(s.Mean-0.6) > 1e-12 || math.Abs(s.SD-0.1) > 1e-12 || s.N != 3 {
		t.Fatalf("%+v", s)
	}
	if half := 4.303 * 0.1 / math.Sqrt(3); math.Abs(s.Hi-(0.6+half)) > 1e-4 || math.Abs(s.Lo-(0.6-half)) > 1e-4 {
		t.Errorf("interval [%v, %v], want 0.6 ∓ %v", s.Lo, s.Hi, half)
	}
	// 1, 2, 3, 4, 5: mean 3, sd √2.5, half-width 2.776 · √2.5/√5 = 1.9630.
	s = TInterval([]float64{1, 2, 3, 4, 5}, 0.95)
	if math.Abs(s.SD-math.Sqrt(2.5)) > 1e-12 || math.Abs(s.Hi-3-1.9630) > 1e-3 {
		t.Errorf("%+v, want 3 ± 1.963", s)
	}
	// One seed: a mean, no spread.
	s = TInterval([]float64{0.4}, 0.95)
	if s.Mean != 0.4 || !math.IsNaN(s.SD) || !math.IsNaN(s.Lo) {
		t.Errorf("n = 1: %+v", s)
	}
	if s := TInterval(nil, 0.95); !math.IsNaN(s.Mean) || s.N != 0 {
		t.Errorf("n = 0: %+v", s)
	}
}
