package rlcore

import (
	"math"
	"math/rand/v2"
	"testing"
)

// advRewards builds a valid group whose total reward (α = β = 0) is r.
func advRewards(r ...float64) []SampleReward {
	out := make([]SampleReward, len(r))
	for i, v := range r {
		out[i] = SampleReward{Valid: true, Terms: Terms{RougeF1: v}}
	}
	return out
}

func advCfg(estimator string) AdvantageConfig {
	c := DefaultAdvantageConfig()
	c.Estimator = estimator
	c.Epsilon = 0
	return c
}

func advNear(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func mustAdv(t *testing.T, cfg AdvantageConfig, w Weights, groups [][]SampleReward) Advantages {
	t.Helper()
	a, err := DefaultRegistry().ComputeAdvantages(cfg, w, groups)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func advCheck(t *testing.T, what string, got, want []float64) {
	t.Helper()
	for i := range want {
		if !advNear(got[i], want[i]) {
			t.Errorf("%s: A[%d] = %.17g, want %.17g", what, i, got[i], want[i])
		}
	}
}

// TestAdvantageHandComputed: rewards 1, 2, 3, 4 (mean 2.5; population variance 1.25,
// sample variance 5/3), worked out by hand.
func TestAdvantageHandComputed(t *testing.T) {
	g := [][]SampleReward{advRewards(1, 2, 3, 4)}
	w := Weights{}
	pop := 1 / math.Sqrt(1.25)
	advCheck(t, "group/population", mustAdv(t, advCfg("group"), w, g).Values[0],
		[]float64{-1.5 * pop, -0.5 * pop, 0.5 * pop, 1.5 * pop})
	c := advCfg("group")
	c.Std = "sample"
	smp := 1 / math.Sqrt(5.0/3)
	advCheck(t, "group/sample", mustAdv(t, c, w, g).Values[0],
		[]float64{-1.5 * smp, -0.5 * smp, 0.5 * smp, 1.5 * smp})
	c = advCfg("group")
	c.Epsilon = 0.5
	e := 1 / (math.Sqrt(1.25) + 0.5) // ε is added to the std
	advCheck(t, "group/eps", mustAdv(t, c, w, g).Values[0], []float64{-1.5 * e, -0.5 * e, 0.5 * e, 1.5 * e})
	advCheck(t, "none", mustAdv(t, advCfg("none"), w, g).Values[0], []float64{-1.5, -0.5, 0.5, 1.5})
	// rloo: 1 − (2+3+4)/3 = −2, 2 − 8/3, 3 − 7/3, 4 − 2.
	advCheck(t, "rloo", mustAdv(t, advCfg("rloo"), w, g).Values[0], []float64{-2, 2 - 8.0/3, 3 - 7.0/3, 2})
}

// TestAdvantageBatchStd: groups {0, 1} and {0, 3}: batch mean 1, population variance
// (1+0+1+4)/4 = 1.5; centring stays per group (means 0.5 and 1.5).
func TestAdvantageBatchStd(t *testing.T) {
	a := mustAdv(t, advCfg("batch"), Weights{}, [][]SampleReward{advRewards(0, 1), advRewards(0, 3)})
	s := math.Sqrt(1.5)
	advCheck(t, "group 0", a.Values[0], []float64{-0.5 / s, 0.5 / s})
	advCheck(t, "group 1", a.Values[1], []float64{-1.5 / s, 1.5 / s})
}

// TestAdvantageSumOfNormalized: α = 2, β = 3. Rouge {0.2, 0.4} and EM {0, 1} z-score
// to ∓1 each; Hit is constant and adds nothing: A = ∓(1 + 2·1).
func TestAdvantageSumOfNormalized(t *testing.T) {
	c := advCfg("group")
	c.Aggregation = "sum_of_normalized"
	g := [][]SampleReward{{
		{Valid: true, Terms: Terms{RougeF1: 0.2, EM: 0, Hit: 1}},
		{Valid: true, Terms: Terms{RougeF1: 0.4, EM: 1, Hit: 1}},
	}}
	a := mustAdv(t, c, Weights{Alpha: 2, Beta: 3}, g)
	advCheck(t, "nts", a.Values[0], []float64{-3, 3})
	if a.Stats.ZeroVarHit != 1 || a.Stats.ZeroVarEM != 0 || a.Stats.ZeroVarRougeL != 0 || a.Stats.ZeroVarGroups != 0 {
		t.Errorf("zero-variance counts %+v, want only Hit", a.Stats)
	}
	// With "sum" the same group has rewards 0.2+0+3 = 3.2 and 0.4+2+3 = 5.4.
	c.Aggregation = "sum"
	advCheck(t, "sum", mustAdv(t, c, Weights{Alpha: 2, Beta: 3}, g).Values[0], []float64{-1, 1})
}

// TestAdvantageNormalizeThenSumIsTRL: TRL's GRPOTrainer with
// multi_objective_aggregation="normalize_then_sum" (trl f2cd577,
// grpo_trainer.py: per-function group z-score with nanstd (Bessel) + 1e-4,
// weighted nansum, then (A − mean) / (nanstd(A) + 1e-4) over the batch),
// run under torch in float64 on two groups of three rollouts with terms
// (F1, EM, Hit) and weights 1, 1, 1. The weighted sums before the batch step
// are −1.577050326499136, −0.5772502865071343, 2.1543006130062703, …; the
// batch step divides them by 1.3756285056701762. (TRL's nanstd computes
// Bessel's count/(count−1) as a float32 tensor, 1.2000000476837158 for 6
// values, which moves its batch std by 2e-8 relative; the vector was
// computed with that factor in float64.)
func TestAdvantageNormalizeThenSumIsTRL(t *testing.T) {
	g := [][]SampleReward{{
		{Valid: true, Terms: Terms{RougeF1: 0, EM: 0}},
		{Valid: true, Terms: Terms{RougeF1: 0.5, EM: 0}},
		{Valid: true, Terms: Terms{RougeF1: 1, EM: 1}},
	}, {
		{Valid: true, Terms: Terms{RougeF1: 0.2, EM: 1}},
		{Valid: true, Terms: Terms{RougeF1: 0.2, EM: 0}},
		{Valid: true, Terms: Terms{RougeF1: 0.8, EM: 0}},
	}}
	c := AdvantageConfig{Estimator: "group", Std: "sample", Epsilon: 1e-4, Aggregation: "normalize_then_sum", ZeroVariance: "keep"}
	w := Weights{Alpha: 1, Beta: 1}
	a := mustAdv(t, c, w, g)
	advCheck(t, "group 0", a.Values[0], []float64{-1.1464216683492114, -0.41962658096119526, 1.5660482493104066})
	advCheck(t, "group 1", a.Values[1], []float64{0.41967502128157474, -0.8392047216020113, 0.41952970032043635})
	// sum_of_normalized is the same without the batch step.
	c.Aggregation = "sum_of_normalized"
	b := mustAdv(t, c, w, g)
	advCheck(t, "sum_of_normalized 0", b.Values[0], []float64{-1.577050326499136, -0.5772502865071343, 2.1543006130062703})
	advCheck(t, "sum_of_normalized 1", b.Values[1], []float64{0.5773169223926721, -1.154433937128731, 0.5771170147360587})
	// A zero-variance group stays at exactly 0 through the batch step.
	flat := []SampleReward{{Valid: true, Terms: Terms{RougeF1: 0.3}}, {Valid: true, Terms: Terms{RougeF1: 0.3}}}
	c.Aggregation = "normalize_then_sum"
	z := mustAdv(t, c, w, append(g, flat))
	if z.Values[2][0] != 0 || z.Values[2][1] != 0 || !z.Include[2][0] {
		t.Errorf("zero-variance group: %v %v", z.Values[2], z.Include[2])
	}
	// Only zero-variance groups and ε = 0: no division by zero.
	c.Epsilon = 0
	if z := mustAdv(t, c, w, [][]SampleReward{flat}); z.Values[0][0] != 0 || z.Values[0][1] != 0 {
		t.Errorf("all-flat batch with ε = 0: %v", z.Values)
	}
}

// TestAdvantageGuardPenaltyTerm: a guarded rollout's reward is its penalty,
// whatever its (real) Rouge-L, EM and Hit, under every aggregation.
// Group: F1 0.5 / 0.5 / 1 with EM 0 / 0 / 1, the third guarded with
// penalty −1; α = 1, β = 0, estimator none (centring only).
func TestAdvantageGuardPenaltyTerm(t *testing.T) {
	g := [][]SampleReward{{
		{Valid: true, Terms: Terms{RougeF1: 0.5}},
		{Valid: true, Terms: Terms{RougeF1: 0.5}},
		{Valid: true, Terms: Terms{RougeF1: 1, EM: 1}, Guarded: true, GuardPenalty: -1},
	}}
	w := Weights{Alpha: 1}
	c := advCfg("none")
	// sum: rewards 0.5, 0.5, −1 (mean 0): A = 0.5, 0.5, −1.
	advCheck(t, "sum", mustAdv(t, c, w, g).Values[0], []float64{0.5, 0.5, -1})
	// sum_of_normalized: terms F1 0.5, 0.5, 0 (mean 1/3), EM 0, 0, 0
	// (constant), guard 0, 0, −1 (mean −1/3): A = 1/6 + 1/3, twice, and
	// −1/3 − 2/3.
	c.Aggregation = "sum_of_normalized"
	advCheck(t, "sum_of_normalized", mustAdv(t, c, w, g).Values[0], []float64{0.5, 0.5, -1})
	// Without the guard the third rollout is the best: rewards 0.5, 0.5, 2 (mean 1).
	g[0][2].Guarded = false
	c.Aggregation = "sum"
	advCheck(t, "unguarded", mustAdv(t, c, w, g).Values[0], []float64{-0.5, -0.5, 1})
}

func advRandomGroups(r *rand.Rand, n, g int, failProb float64) [][]SampleReward {
	out := make([][]SampleReward, n)
	for i := range out {
		out[i] = make([]SampleReward, g)
		for k := range out[i] {
			out[i][k] = SampleReward{Valid: r.Float64() >= failProb, Terms: Terms{
				RougeF1: r.Float64(), EM: float64(r.IntN(2)), Hit: float64(r.IntN(2))}}
		}
	}
	return out
}

var advEstimators = []string{"group", "batch", "none", "rloo"}

// TestAdvantageGroupSumsToZero: every estimator centres each group (rloo too: the
// leave-one-out advantages sum to n/(n−1)·Σ(r−m) = 0).
func TestAdvantageGroupSumsToZero(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	w := Weights{Alpha: 1, Beta: 0.5}
	for _, est := range advEstimators {
		for _, agg := range []string{"sum", "sum_of_normalized", "normalize_then_sum"} {
			c := DefaultAdvantageConfig()
			c.Estimator, c.Aggregation = est, agg
			a := mustAdv(t, c, w, advRandomGroups(r, 50, 8, 0.2))
			for g := range a.Values {
				sum, scale := 0.0, 0.0
				for i, v := range a.Values[g] {
					if a.Include[g][i] {
						sum += v
						scale += math.Abs(v)
					}
				}
				if math.Abs(sum) > 1e-9*math.Max(1, scale) {
					t.Fatalf("%s/%s: group %d sums to %g", est, agg, g, sum)
				}
			}
		}
	}
}

// TestAdvantageShiftInvariance: adding a constant to every reward changes nothing.
func TestAdvantageShiftInvariance(t *testing.T) {
	r := rand.New(rand.NewPCG(2, 2))
	for _, est := range advEstimators {
		c := DefaultAdvantageConfig()
		c.Estimator = est
		groups := advRandomGroups(r, 20, 6, 0.1)
		shifted := make([][]SampleReward, len(groups))
		for g := range groups {
			shifted[g] = append([]SampleReward(nil), groups[g]...)
			for i := range shifted[g] {
				shifted[g][i].Terms.RougeF1 += 7.25
			}
		}
		w := Weights{Alpha: 1, Beta: 1}
		a, b := mustAdv(t, c, w, groups), mustAdv(t, c, w, shifted)
		for g := range a.Values {
			for i := range a.Values[g] {
				if math.Abs(a.Values[g][i]-b.Values[g][i]) > 1e-9 || a.Include[g][i] != b.Include[g][i] {
					t.Fatalf("%s: shift moved group %d sample %d: %v → %v", est, g, i, a.Values[g][i], b.Values[g][i])
				}
			}
		}
	}
}

// TestAdvantageRLOOClosedForm: r_i − mean of the others = n/(n−1)·(r_i − m).
func TestAdvantageRLOOClosedForm(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	groups := advRandomGroups(r, 30, 5, 0)
	a := mustAdv(t, advCfg("rloo"), Weights{Alpha: 1, Beta: 1}, groups)
	for g, grp := range groups {
		m, n := 0.0, float64(len(grp))
		for _, s := range grp {
			m += s.Terms.RougeF1 + s.Terms.EM + s.Terms.Hit
		}
		m /= n
		for i, s := range grp {
			want := n / (n - 1) * (s.Terms.RougeF1 + s.Terms.EM + s.Terms.Hit - m)
			if a.Include[g][i] && math.Abs(a.Values[g][i]-want) > 1e-12 {
				t.Fatalf("group %d sample %d: %v, closed form %v", g, i, a.Values[g][i], want)
			}
		}
	}
}

// TestAdvantageFailedRolloutIsolated: a failed rollout, whatever its (garbage) score,
// does not move its siblings' advantages, is excluded and is counted.
func TestAdvantageFailedRolloutIsolated(t *testing.T) {
	w := Weights{Alpha: 1, Beta: 1}
	base := advRewards(0.1, 0.5, 0.9)
	withFail := []SampleReward{base[0], {Valid: false, Terms: Terms{RougeF1: 1e9}}, base[1], base[2]}
	for _, est := range []string{"group", "none", "rloo"} {
		a := mustAdv(t, advCfg(est), w, [][]SampleReward{base})
		b := mustAdv(t, advCfg(est), w, [][]SampleReward{withFail})
		got := []float64{b.Values[0][0], b.Values[0][2], b.Values[0][3]}
		for i := range got {
			if math.Float64bits(got[i]) != math.Float64bits(a.Values[0][i]) {
				t.Errorf("%s: sibling %d moved: %v vs %v", est, i, got[i], a.Values[0][i])
			}
		}
		if b.Include[0][1] || b.Values[0][1] != 0 || b.Stats.FailedRollouts != 1 || b.Stats.DroppedGroups != 0 {
			t.Errorf("%s: failed rollout included or miscounted: %+v", est, b)
		}
	}
	// A group left with one valid rollout is dropped.
	a := mustAdv(t, advCfg("group"), w, [][]SampleReward{{base[0], {Valid: false}}, base})
	if a.Include[0][0] || a.Stats.DroppedGroups != 1 || a.Stats.FailedRollouts != 1 || a.Stats.Groups != 2 || a.Stats.ComparableGroups != 1 {
		t.Errorf("one-valid group: %+v", a)
	}
}

func TestAdvantageZeroVariance(t *testing.T) {
	w := Weights{Alpha: 1, Beta: 1}
	flat := []SampleReward{
		{Valid: true, Terms: Terms{RougeF1: 0.3, EM: 0, Hit: 1}},
		{Valid: true, Terms: Terms{RougeF1: 0.3, EM: 0, Hit: 1}},
		{Valid: false},
	}
	varied := advRewards(0, 1)
	keep := mustAdv(t, advCfg("group"), w, [][]SampleReward{flat, varied})
	if !keep.Include[0][0] || !keep.Include[0][1] || keep.Values[0][0] != 0 || keep.Values[0][1] != 0 {
		t.Errorf("keep: %+v", keep)
	}
	st := keep.Stats
	if st.ZeroVarGroups != 1 || st.ZeroVarRougeL != 1 || st.ZeroVarEM != 2 || st.ZeroVarHit != 2 || st.DroppedGroups != 0 {
		t.Errorf("keep stats: %+v", st)
	}
	c := advCfg("group")
	c.ZeroVariance = "drop"
	drop := mustAdv(t, c, w, [][]SampleReward{flat, varied})
	if drop.Include[0][0] || drop.Include[0][1] || drop.Stats.DroppedGroups != 1 || drop.Stats.ComparableGroups != 2 || !drop.Include[1][0] {
		t.Errorf("drop: %+v", drop)
	}
	// Equal totals from different terms are not zero variance under
	// sum_of_normalized: F1 0.5 + EM 0 vs F1 0 + EM 0.5·… here α = 0.5.
	c = advCfg("group")
	c.Aggregation = "sum_of_normalized"
	g := [][]SampleReward{{
		{Valid: true, Terms: Terms{RougeF1: 0.5, EM: 0}},
		{Valid: true, Terms: Terms{RougeF1: 0, EM: 1}},
	}}
	a := mustAdv(t, c, Weights{Alpha: 0.5}, g)
	if a.Stats.ZeroVarGroups != 0 || a.Values[0][0] != 0.5 || a.Values[0][1] != -0.5 {
		t.Errorf("nts equal totals: %+v", a)
	}
	c.Aggregation = "sum"
	if a := mustAdv(t, c, Weights{Alpha: 0.5}, g); a.Stats.ZeroVarGroups != 1 {
		t.Errorf("sum equal totals not counted as zero variance: %+v", a.Stats)
	}
}

func TestAdvantageStats(t *testing.T) {
	a := mustAdv(t, advCfg("none"), Weights{}, [][]SampleReward{advRewards(0, 2), advRewards(1, 1, 4)})
	// Advantages −1, 1, −1, −1, 2: mean 0, population std √(8/5), |A| mean 6/5.
	if !advNear(a.Stats.Mean, 0) || !advNear(a.Stats.Std, math.Sqrt(8.0/5)) || !advNear(a.Stats.AbsMean, 6.0/5) {
		t.Errorf("stats %+v", a.Stats)
	}
}

func TestAdvantageErrors(t *testing.T) {
	good := [][]SampleReward{advRewards(0, 1)}
	if _, err := DefaultRegistry().ComputeAdvantages(AdvantageConfig{Estimator: "ppo"}, Weights{}, good); err == nil {
		t.Error("unknown estimator accepted")
	}
	if _, err := DefaultRegistry().ComputeAdvantages(DefaultAdvantageConfig(), Weights{Alpha: -1}, good); err == nil {
		t.Error("negative alpha accepted")
	}
	bad := advRewards(0, math.NaN())
	if _, err := DefaultRegistry().ComputeAdvantages(DefaultAdvantageConfig(), Weights{}, [][]SampleReward{bad}); err == nil {
		t.Error("NaN reward accepted")
	}
	if a, err := DefaultRegistry().ComputeAdvantages(DefaultAdvantageConfig(), Weights{}, nil); err != nil || a.Stats.Groups != 0 {
		t.Errorf("empty batch: %v %+v", err, a)
	}
}
