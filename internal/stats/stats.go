// Package stats holds the statistics that make comparisons honest: bootstrap
// intervals and paired randomization tests that resample conversations (not
// turns), rank and linear correlations, and the one mean/standard-deviation
// used by advantages, metrics and reports. evaluate and ablate both use it.
package stats

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
)

// Config sets the resampling of the bootstrap and randomization tests.
type Config struct {
	// Resamples is the number of bootstrap resamples and of random sign flips.
	Resamples int `json:"resamples"`
	// Level is the confidence level of the intervals, e.g. 0.95.
	Level float64 `json:"level"`
	// Seed makes every interval and p-value reproducible.
	Seed uint64 `json:"seed"`
}

// DefaultConfig is 2000 resamples at 95%.
func DefaultConfig() Config { return Config{Resamples: 2000, Level: 0.95, Seed: 1} }

// Validate rejects settings that cannot give an interval: the level must be
// in (0, 1), and each tail of the percentile interval must hold at least one
// resample (Resamples ≥ MinResamples(Level)). With fewer, the "interval" is
// one or two resamples' means, which need not even contain the estimate.
func (c Config) Validate() error {
	if !(c.Level > 0 && c.Level < 1) {
		return fmt.Errorf("stats: level must be in (0, 1), got %v", c.Level)
	}
	if least := MinResamples(c.Level); c.Resamples < least {
		return fmt.Errorf("stats: resamples must be ≥ %d for a %v interval (each tail needs a resample), got %d", least, c.Level, c.Resamples)
	}
	return nil
}

// MinResamples is the fewest resamples whose (1−level)/2 tails hold one
// resample each: 40 at level 0.95.
func MinResamples(level float64) int {
	return int(math.Ceil(2/(1-level) - 1e-9))
}

// Estimate is a mean over turns with a cluster-bootstrap confidence interval.
type Estimate struct {
	Mean     float64 `json:"mean"`
	Lo       float64 `json:"ci_lo"`
	Hi       float64 `json:"ci_hi"`
	Turns    int     `json:"turns"`
	Clusters int     `json:"conversations"`
}

// Comparison is system − baseline on the turns both completed: the mean
// difference, its paired cluster-bootstrap interval, and the two-sided p-value
// of a paired randomization (sign-flip) test over conversations.
type Comparison struct {
	Diff     float64 `json:"diff"`
	Lo       float64 `json:"ci_lo"`
	Hi       float64 `json:"ci_hi"`
	P        float64 `json:"p_value"`
	Turns    int     `json:"turns"`
	Clusters int     `json:"conversations"`
}

// ErrNoData is returned when there is nothing to estimate from.
var ErrNoData = errors.New("no finite values")

// cluster is the sum and count of the finite values of one conversation: all
// a ratio-of-means bootstrap needs.
type cluster struct {
	sum float64
	n   int
}

func summarize(values [][]float64) []cluster {
	cs := make([]cluster, 0, len(values))
	for _, vs := range values {
		var c cluster
		for _, v := range vs {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				continue // a failed turn: counted by the caller, not averaged
			}
			c.sum += v
			c.n++
		}
		if c.n > 0 {
			cs = append(cs, c)
		}
	}
	return cs
}

func ratio(cs []cluster) (float64, int) {
	var s float64
	var n int
	for _, c := range cs {
		s += c.sum
		n += c.n
	}
	if n == 0 {
		return math.NaN(), 0
	}
	return s / float64(n), n
}

// Bootstrap estimates the mean over turns of values, given per conversation
// (values[c] are the turns of conversation c; NaN marks a failed turn), with
// a percentile interval from resampling whole conversations with replacement.
// Resampling conversations rather than turns keeps the interval honest when
// turns of one conversation are correlated.
func Bootstrap(values [][]float64, cfg Config) (Estimate, error) {
	if err := cfg.Validate(); err != nil {
		return Estimate{}, err
	}
	cs := summarize(values)
	mean, n := ratio(cs)
	if n == 0 {
		return Estimate{}, ErrNoData
	}
	stats := resampleMeans(cs, rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15)), cfg.Resamples)
	lo, hi := percentileInterval(stats, cfg.Level)
	return Estimate{Mean: mean, Lo: lo, Hi: hi, Turns: n, Clusters: len(cs)}, nil
}

// resampleMeans draws conversations with replacement, n times, and returns
// each resample's mean over turns (the cluster bootstrap).
func resampleMeans(cs []cluster, rng *rand.Rand, n int) []float64 {
	means := make([]float64, 0, n)
	for range n {
		var s float64
		var m int
		for range cs {
			c := cs[rng.IntN(len(cs))]
			s += c.sum
			m += c.n
		}
		means = append(means, s/float64(m))
	}
	return means
}

// Paired compares sys with base turn by turn. Both must have the same shape
// (the same turns of the same conversations); a turn where either side is NaN
// is left out of the comparison. The p-value comes from flipping the sign of
// each conversation's summed difference at random (exact under the null that
// the two systems are exchangeable within a conversation); the interval from
// resampling conversations.
func Paired(sys, base [][]float64, cfg Config) (Comparison, error) {
	if err := cfg.Validate(); err != nil {
		return Comparison{}, err
	}
	if len(sys) != len(base) {
		return Comparison{}, fmt.Errorf("paired: %d conversations vs %d in the baseline", len(sys), len(base))
	}
	diffs := make([][]float64, len(sys))
	for c := range sys {
		if len(sys[c]) != len(base[c]) {
			return Comparison{}, fmt.Errorf("paired: conversation %d has %d turns vs %d in the baseline", c, len(sys[c]), len(base[c]))
		}
		diffs[c] = make([]float64, len(sys[c]))
		for t := range sys[c] {
			diffs[c][t] = sys[c][t] - base[c][t] // NaN when either failed
		}
	}
	cs := summarize(diffs)
	obs, n := ratio(cs)
	if n == 0 {
		return Comparison{}, ErrNoData
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6a09e667f3bcc909))
	boot := resampleMeans(cs, rng, cfg.Resamples)
	lo, hi := percentileInterval(boot, cfg.Level)

	// The total turn count is fixed under sign flips, so comparing |Σ±d_c|
	// is comparing the mean difference.
	var total float64
	for _, c := range cs {
		total += c.sum
	}
	absObs := math.Abs(total)
	tol := 1e-12 * (1 + absObs) // ties with the observed value count as extreme
	extreme := 0
	for range cfg.Resamples {
		var s float64
		for _, c := range cs {
			if rng.Uint64()&1 == 1 {
				s += c.sum
			} else {
				s -= c.sum
			}
		}
		if math.Abs(s) >= absObs-tol {
			extreme++
		}
	}
	p := float64(extreme+1) / float64(cfg.Resamples+1)
	return Comparison{Diff: obs, Lo: lo, Hi: hi, P: p, Turns: n, Clusters: len(cs)}, nil
}

// percentileInterval returns the (1−level)/2 and (1+level)/2 quantiles of xs
// (linear interpolation between order statistics); xs is sorted in place.
func percentileInterval(xs []float64, level float64) (float64, float64) {
	sort.Float64s(xs)
	a := (1 - level) / 2
	return quantileSorted(xs, a), quantileSorted(xs, 1-a)
}

func quantileSorted(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	pos := q * float64(len(xs)-1)
	i := int(math.Floor(pos))
	if i >= len(xs)-1 {
		return xs[len(xs)-1]
	}
	f := pos - float64(i)
	return xs[i] + f*(xs[i+1]-xs[i])
}

// KendallTauB is Kendall's τ-b between x and y (ties handled as in
// scipy.stats.kendalltau). ok is false when it is undefined: fewer than two
// items, or either side constant.
func KendallTauB(x, y []float64) (tau float64, ok bool, err error) {
	if len(x) != len(y) {
		return 0, false, fmt.Errorf("kendall: %d vs %d values", len(x), len(y))
	}
	var conc, disc, tiesX, tiesY, pairs float64
	for i := 0; i < len(x); i++ {
		for j := i + 1; j < len(x); j++ {
			pairs++
			dx := sign(x[i] - x[j])
			dy := sign(y[i] - y[j])
			switch {
			case dx == 0 && dy == 0:
				tiesX++
				tiesY++
			case dx == 0:
				tiesX++
			case dy == 0:
				tiesY++
			case dx == dy:
				conc++
			default:
				disc++
			}
		}
	}
	den := math.Sqrt((pairs - tiesX) * (pairs - tiesY))
	if den == 0 {
		return 0, false, nil
	}
	return (conc - disc) / den, true, nil
}

func sign(v float64) int {
	switch {
	case v > 0:
		return 1
	case v < 0:
		return -1
	}
	return 0
}

// Pearson is the sample correlation of x and y; ok is false when either is
// constant or there are fewer than two pairs.
func Pearson(x, y []float64) (r float64, ok bool, err error) {
	if len(x) != len(y) {
		return 0, false, fmt.Errorf("pearson: %d vs %d values", len(x), len(y))
	}
	n := float64(len(x))
	if n < 2 || constant(x) || constant(y) {
		return 0, false, nil // checked exactly: rounding in the mean would hide it
	}
	var mx, my float64
	for i := range x {
		mx += x[i]
		my += y[i]
	}
	mx /= n
	my /= n
	var sxy, sxx, syy float64
	for i := range x {
		dx, dy := x[i]-mx, y[i]-my
		sxy += dx * dy
		sxx += dx * dx
		syy += dy * dy
	}
	if sxx == 0 || syy == 0 {
		return 0, false, nil
	}
	return sxy / math.Sqrt(sxx*syy), true, nil
}

func constant(xs []float64) bool {
	for _, v := range xs[1:] {
		if v != xs[0] {
			return false
		}
	}
	return true
}
