package stats

import "gonum.org/v1/gonum/stat"

// Mean is the arithmetic mean of xs, 0 for none (a metric over nothing is
// reported as a count of 0 elsewhere, never as NaN in a log).
func Mean(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	return stat.Mean(xs, nil)
}

// MeanStd returns the mean and the standard deviation of xs: the population
// one (÷n) or, with sample, the Bessel-corrected one (÷(n−1)). Too few values
// for the chosen divisor give a standard deviation of 0.
func MeanStd(xs []float64, sample bool) (mean, std float64) {
	switch {
	case len(xs) == 0:
		return 0, 0
	case sample && len(xs) < 2:
		return stat.Mean(xs, nil), 0
	case sample:
		return stat.MeanStdDev(xs, nil)
	default:
		return stat.PopMeanStdDev(xs, nil)
	}
}
