package stats

import (
	"math"

	"gonum.org/v1/gonum/stat/distuv"
)

// Spread is the mean, sample standard deviation and Student-t interval of a
// few independent values (e.g. one metric over training seeds).
type Spread struct {
	N    int
	Mean float64 // NaN for n = 0
	// SD is the sample standard deviation (n − 1); NaN for n < 2.
	SD float64
	// Lo, Hi: mean ∓ t_{(1+level)/2, n−1} · SD/√n; NaN for n < 2.
	Lo, Hi float64
	Level  float64
}

// TInterval summarizes xs with a two-sided Student-t interval at level
// (e.g. 0.95). It assumes the values are independent draws of a roughly
// normal quantity; with n < 2 only the mean is defined.
func TInterval(xs []float64, level float64) Spread {
	s := Spread{N: len(xs), Level: level, Mean: math.NaN(), SD: math.NaN(), Lo: math.NaN(), Hi: math.NaN()}
	if s.N == 0 {
		return s
	}
	var sum float64
	for _, x := range xs {
		sum += x
	}
	s.Mean = sum / float64(s.N)
	if s.N < 2 {
		return s
	}
	var ss float64
	for _, x := range xs {
		ss += (x - s.Mean) * (x - s.Mean)
	}
	s.SD = math.Sqrt(ss / float64(s.N-1))
	t := distuv.StudentsT{Mu: 0, Sigma: 1, Nu: float64(s.N - 1)}.Quantile((1 + level) / 2)
	half := t * s.SD / math.Sqrt(float64(s.N))
	s.Lo, s.Hi = s.Mean-half, s.Mean+half
	return s
}
