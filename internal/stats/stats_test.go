package stats

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// normalClusters draws nConv conversations of turnsPer turns each: a shared
// per-conversation offset plus per-turn noise, around mean.
func normalClusters(seed uint64, nConv, turnsPer int, mean, convSD, turnSD float64) [][]float64 {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([][]float64, nConv)
	for c := range out {
		off := rng.NormFloat64() * convSD
		for range turnsPer {
			out[c] = append(out[c], mean+off+rng.NormFloat64()*turnSD)
		}
	}
	return out
}

func TestBootstrapMeanIgnoresFailedTurns(t *testing.T) {
	vals := [][]float64{{1, 0, math.NaN()}, {1, 1}, {math.NaN()}}
	est, err := Bootstrap(vals, Config{Resamples: 200, Level: 0.95, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	// (1+0+1+1)/4 over the two conversations that have finite turns.
	if est.Mean != 0.75 || est.Turns != 4 || est.Clusters != 2 {
		t.Fatalf("got %+v, want mean 0.75 over 4 turns in 2 conversations", est)
	}
	// Only two clusters: every resample is (a,a), (a,b) or (b,b), i.e. a
	// ratio of 1/3, 3/4 or 1; the interval must lie within those.
	if est.Lo < 1.0/3-1e-12 || est.Hi > 1+1e-12 {
		t.Fatalf("interval [%v, %v] outside the attainable [1/3, 1]", est.Lo, est.Hi)
	}
}

func TestBootstrapConstantHasZeroWidth(t *testing.T) {
	est, err := Bootstrap([][]float64{{0.5, 0.5}, {0.5}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if est.Lo != 0.5 || est.Hi != 0.5 || est.Mean != 0.5 {
		t.Fatalf("constant data: got %+v", est)
	}
}

func TestBootstrapNoData(t *testing.T) {
	if _, err := Bootstrap([][]float64{{math.NaN()}}, DefaultConfig()); err == nil {
		t.Fatal("want ErrNoData for only failed turns")
	}
}

func TestBootstrapContainsMeanAndNarrows(t *testing.T) {
	cfg := Config{Resamples: 1000, Level: 0.95, Seed: 11}
	for seed := uint64(1); seed <= 5; seed++ {
		small, err := Bootstrap(normalClusters(seed, 10, 5, 0.4, 0.1, 0.2), cfg)
		if err != nil {
			t.Fatal(err)
		}
		large, err := Bootstrap(normalClusters(seed, 250, 5, 0.4, 0.1, 0.2), cfg)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range []Estimate{small, large} {
			if !(e.Lo <= e.Mean && e.Mean <= e.Hi) {
				t.Fatalf("seed %d: interval [%v, %v] does not contain the mean %v", seed, e.Lo, e.Mean, e.Hi)
			}
		}
		// Width scales like 1/√conversations: 25× the data, about 1/5 the width.
		ws, wl := small.Hi-small.Lo, large.Hi-large.Lo
		if !(wl < ws/3) {
			t.Fatalf("seed %d: width %v with 250 conversations not well below %v with 10", seed, wl, ws)
		}
	}
}

// Over many simulated evaluations a 95% interval covers the true mean about
// 95% of the time (the percentile bootstrap runs a little under with 30
// conversations).
func TestBootstrapCoverage(t *testing.T) {
	covered := 0
	const sets = 200
	for s := uint64(0); s < sets; s++ {
		e, err := Bootstrap(normalClusters(500+s, 30, 4, 0.4, 0.1, 0.2), Config{Resamples: 400, Level: 0.95, Seed: s})
		if err != nil {
			t.Fatal(err)
		}
		if e.Lo < 0.4 && 0.4 < e.Hi {
			covered++
		}
	}
	if frac := float64(covered) / sets; frac < 0.88 || frac > 0.99 {
		t.Fatalf("coverage %v of nominal 0.95", frac)
	}
}

// Turns of one conversation that move together carry less information than
// independent turns; resampling conversations must show that.
func TestBootstrapClustersWidenCorrelatedTurns(t *testing.T) {
	cfg := Config{Resamples: 2000, Level: 0.95, Seed: 5}
	clustered := normalClusters(9, 30, 8, 0.5, 0.3, 0.01)
	var flat [][]float64 // the same turns, each pretending to be its own conversation
	for _, c := range clustered {
		for _, v := range c {
			flat = append(flat, []float64{v})
		}
	}
	ec, err := Bootstrap(clustered, cfg)
	if err != nil {
		t.Fatal(err)
	}
	ef, err := Bootstrap(flat, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(ec.Mean-ef.Mean) > 1e-12 {
		t.Fatalf("same turns, different means: %v vs %v", ec.Mean, ef.Mean)
	}
	// With turn noise ≪ conversation noise the design effect is ≈ √8 ≈ 2.8.
	if !((ec.Hi - ec.Lo) > 2*(ef.Hi-ef.Lo)) {
		t.Fatalf("cluster width %v not > 2× turn width %v", ec.Hi-ec.Lo, ef.Hi-ef.Lo)
	}
}

func TestPairedDetectsShiftNotNull(t *testing.T) {
	cfg := Config{Resamples: 2000, Level: 0.95, Seed: 21}
	base := normalClusters(2, 40, 6, 0.5, 0.15, 0.2)
	rng := rand.New(rand.NewPCG(99, 1))
	shifted := make([][]float64, len(base))
	for c := range base {
		for _, v := range base[c] {
			shifted[c] = append(shifted[c], v+0.08+rng.NormFloat64()*0.1)
		}
	}
	cmp, err := Paired(shifted, base, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if cmp.P > 0.01 || cmp.Lo <= 0 || math.Abs(cmp.Diff-0.08) > 0.03 {
		t.Fatalf("real shift of 0.08 not detected: %+v", cmp)
	}

	// Null: symmetric noise around the baseline. Over 40 independent data
	// sets a 5% test should reject about twice; allow a little more.
	rejections := 0
	for s := uint64(0); s < 40; s++ {
		r := rand.New(rand.NewPCG(1000+s, 3))
		null := make([][]float64, len(base))
		for c := range base {
			for _, v := range base[c] {
				null[c] = append(null[c], v+r.NormFloat64()*0.1)
			}
		}
		c, err := Paired(null, base, Config{Resamples: 500, Level: 0.95, Seed: s})
		if err != nil {
			t.Fatal(err)
		}
		if c.P < 0.05 {
			rejections++
		}
	}
	if rejections > 5 {
		t.Fatalf("null rejected %d of 40 times at 5%%", rejections)
	}
}

func TestPairedSignFlipDistribution(t *testing.T) {
	// One conversation: every flip gives |Σ| = |obs|, so p = 1.
	c, err := Paired([][]float64{{1, 2}}, [][]float64{{0, 0}}, Config{Resamples: 100, Level: 0.9, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if c.P != 1 || c.Diff != 1.5 {
		t.Fatalf("one conversation: got %+v, want p 1, diff 1.5", c)
	}
	// Two conversations with equal differences: |±1±1| ≥ 2 with probability ½.
	c, err = Paired([][]float64{{1}, {1}}, [][]float64{{0}, {0}}, Config{Resamples: 20000, Level: 0.9, Seed: 2})
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(c.P-0.5) > 0.02 {
		t.Fatalf("two conversations: p %v, want ≈ 0.5", c.P)
	}
	// A turn failed on either side is left out of the pairs.
	c, err = Paired([][]float64{{1, math.NaN()}, {3}}, [][]float64{{0, 5}, {math.NaN()}}, DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if c.Turns != 1 || c.Clusters != 1 || c.Diff != 1 {
		t.Fatalf("failed turns not excluded: %+v", c)
	}
	if _, err := Paired([][]float64{{1}}, [][]float64{{1, 2}}, DefaultConfig()); err == nil {
		t.Fatal("want an error for mismatched shapes")
	}
}

func TestKendallTauBHandComputed(t *testing.T) {
	cases := []struct {
		x, y []float64
		want float64
		ok   bool
	}{
		{[]float64{1, 2, 3, 4}, []float64{1, 2, 3, 4}, 1, true},
		{[]float64{1, 2, 3, 4}, []float64{4, 3, 2, 1}, -1, true},
		// One discordant pair (2,3) of six: (5−1)/6.
		{[]float64{1, 2, 3, 4}, []float64{1, 3, 2, 4}, 4.0 / 6, true},
		// 4 concordant, a tie in x and a tie in y: 4/√(5·5) (scipy: 0.8).
		{[]float64{1, 2, 2, 3}, []float64{1, 2, 3, 3}, 0.8, true},
		// A pair tied on both sides leaves both denominator terms once:
		// 3 pairs, 1 joint tie, 2 concordant → 2/√(2·2) = 1 (scipy: 1.0).
		{[]float64{1, 1, 2}, []float64{5, 5, 7}, 1, true},
		{[]float64{1, 1, 1}, []float64{1, 2, 3}, 0, false},
		{[]float64{1}, []float64{1}, 0, false},
	}
	for i, c := range cases {
		got, ok, err := KendallTauB(c.x, c.y)
		if err != nil {
			t.Fatal(err)
		}
		if ok != c.ok || math.Abs(got-c.want) > 1e-12 {
			t.Errorf("case %d: τ=%v ok=%v, want %v ok=%v", i, got, ok, c.want, c.ok)
		}
	}
	if _, _, err := KendallTauB([]float64{1}, nil); err == nil {
		t.Error("want a length-mismatch error")
	}
}

func TestPearsonHandComputed(t *testing.T) {
	// dx = (−1,0,1), dy = (−7/3,−1/3,8/3): Σdxdy = 5, Σdx² = 2, Σdy² = 114/9.
	r, ok, err := Pearson([]float64{1, 2, 3}, []float64{2, 4, 7})
	if err != nil || !ok {
		t.Fatal(err, ok)
	}
	if want := 5 / math.Sqrt(2*114.0/9); math.Abs(r-want) > 1e-12 {
		t.Fatalf("r = %v, want %v", r, want)
	}
	if _, ok, _ := Pearson([]float64{0.1, 0.1, 0.1}, []float64{1, 2, 3}); ok {
		t.Fatal("constant side must be undefined")
	}
}

// Each tail of the percentile interval must hold a resample: 2/(1−level)
// resamples at least (40 at 95%, 20 at 90%, 200 at 99%). With one resample
// the "interval" was that resample's mean, which need not hold the estimate.
func TestValidateWantsAResampleInEachTail(t *testing.T) {
	for _, c := range []struct {
		level float64
		least int
	}{{0.95, 40}, {0.9, 20}, {0.99, 200}, {0.5, 4}} {
		if got := MinResamples(c.level); got != c.least {
			t.Errorf("MinResamples(%v) = %d, want %d", c.level, got, c.least)
		}
		if err := (Config{Resamples: c.least, Level: c.level}).Validate(); err != nil {
			t.Errorf("level %v, %d resamples: %v", c.level, c.least, err)
		}
		err := (Config{Resamples: c.least - 1, Level: c.level}).Validate()
		if err == nil || !strings.Contains(err.Error(), fmt.Sprintf("must be ≥ %d", c.least)) {
			t.Errorf("level %v, %d resamples: got %v", c.level, c.least-1, err)
		}
	}
	if _, err := Bootstrap([][]float64{{1, 2}, {3}}, Config{Resamples: 1, Level: 0.95}); err == nil {
		t.Error("Bootstrap with one resample: no error")
	}
}
