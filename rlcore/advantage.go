package rlcore

import (
	"fmt"
	"math"

	"github.com/himes-rl/himes/internal/stats"
)

// Terms are one rollout's reward terms (hser.Score's): Rouge-L F1, EM,
// Hit, the rank-incentive term, and the retrieval metrics of the rollout's
// own ranking against the turn's judgments (Recall@k, NDCG@k, reciprocal
// rank; 0 on an unjudged turn, where their weights must be 0).
type Terms struct{ RougeF1, EM, Hit, Rank, Recall, NDCG, RR float64 }

// Weights are the reward's term weights (hser.Weights and the retrieval
// terms' weights): Rouge-L's (nil: 1, HSER's R), α of EM, β of Hit, the
// rank term's, and Recall@k's, NDCG@k's and RR's. The per-term
// aggregations weigh the normalized terms with them.
type Weights struct {
	RougeL                              *float64
	Alpha, Beta, Rank, Recall, NDCG, RR float64
}

// rougeL is Rouge-L's weight: RougeL, or 1 when unset.
func (w Weights) rougeL() float64 {
	if w.RougeL == nil {
		return 1
	}
	return *w.RougeL
}

// SampleReward is one rollout's reward as the advantage code sees it.
type SampleReward struct {
	// Valid is false when the rollout failed (retrieval or responder error):
	// it is left out of its group's baseline and of the update, and is never
	// scored 0.
	Valid bool
	Terms Terms // only read when Valid
	// Guarded: a reward-hacking guard replaced the reward by GuardPenalty
	// (the guard_penalty term). The rollout's reward is then GuardPenalty
	// whatever its Terms; for the per-term aggregations its Rouge-L, EM, Hit
	// and rank terms count as 0 and the guard term as GuardPenalty.
	Guarded      bool
	GuardPenalty float64
}

// Terms of a rollout as the reward sees them: the scores, or zeros (and
// the guard penalty, guard) for a guarded rollout.
func (s SampleReward) scored(v float64) float64 {
	if s.Guarded {
		return 0
	}
	return v
}

func (s SampleReward) rougeF1() float64 { return s.scored(s.Terms.RougeF1) }
func (s SampleReward) em() float64      { return s.scored(s.Terms.EM) }
func (s SampleReward) hit() float64     { return s.scored(s.Terms.Hit) }
func (s SampleReward) rank() float64    { return s.scored(s.Terms.Rank) } // hser.RankReward
func (s SampleReward) recall() float64  { return s.scored(s.Terms.Recall) }
func (s SampleReward) ndcg() float64    { return s.scored(s.Terms.NDCG) }
func (s SampleReward) rr() float64      { return s.scored(s.Terms.RR) }

func (s SampleReward) guard() float64 {
	if s.Guarded {
		return s.GuardPenalty
	}
	return 0
}

// reward is R (Weights.Reward), or the guard
// penalty for a guarded rollout (the value the training loop logs).
func (s SampleReward) reward(w Weights) float64 {
	if s.Guarded {
		return s.GuardPenalty
	}
	return w.Reward(s.Terms)
}

// Reward is R = w·F1 + α·EM + β·Hit (w Rouge-L's weight, 1 unless set),
// plus Rank·t.Rank, Recall·t.Recall, NDCG·t.NDCG and RR·t.RR, each only when
// its weight is non-zero: the same arithmetic, in the same order, as
// hser's Scorer.WithRetrieval (grpo's TestRewardWeightsMatchHSER pins the
// two bit for bit).
func (w Weights) Reward(t Terms) float64 {
	r := w.rougeL()*t.RougeF1 + w.Alpha*t.EM + w.Beta*t.Hit
	for _, x := range [...]struct{ w, v float64 }{{w.Rank, t.Rank}, {w.Recall, t.Recall}, {w.NDCG, t.NDCG}, {w.RR, t.RR}} {
		if x.w != 0 {
			r += x.w * x.v
		}
	}
	return r
}

// AdvantageStats are the step metrics of one advantage computation.
type AdvantageStats struct {
	// Groups is the number of input groups. DroppedGroups counts the groups
	// excluded from the update: fewer than 2 valid rollouts, or zero
	// variance with ZeroVariance "drop". FailedRollouts counts invalid
	// rollouts in all groups.
	Groups, DroppedGroups, FailedRollouts int
	// ComparableGroups counts the groups with ≥ 2 valid rollouts, over which
	// the zero-variance counts below are taken (their natural denominator).
	ComparableGroups int
	// ZeroVarGroups counts groups (with ≥ 2 valid rollouts) whose advantages
	// are all zero by construction: with Aggregation "sum" the total reward is
	// the same for every valid rollout; with "sum_of_normalized" and
	// "normalize_then_sum" every term is. ZeroVarRougeL, ZeroVarEM and ZeroVarHit count the groups in which
	// that term alone is constant.
	ZeroVarGroups                        int
	ZeroVarRougeL, ZeroVarEM, ZeroVarHit int
	// Mean, Std (population) and AbsMean of the advantages of the included
	// samples; 0 when none is included.
	Mean, Std, AbsMean float64
}

// Advantages is the result of ComputeAdvantages.
type Advantages struct {
	Values  [][]float64 // same shape as the input groups; 0 where not included
	Include [][]bool    // sample goes into the policy update
	Stats   AdvantageStats
}

// term is one reward quantity that is normalized on its own: the total
// reward with Aggregation "sum", or one of the three terms with
// "sum_of_normalized" and "normalize_then_sum".
type term struct {
	weight float64
	get    func(SampleReward) float64
}

// ComputeAdvantages turns the rewards of a batch of groups (groups[g][i]:
// prompt g's rollout i) into per-rollout advantages of the same shape,
// with the estimator cfg.Estimator names in r.
//
// Rewards: with Aggregation "sum" the reward is R = w.Reward(Terms), or the
// guard penalty of a guarded rollout. With "sum_of_normalized" each term (Rouge-L
// F1, EM, Hit and the guard penalty, see SampleReward) is normalized within
// its group by the estimator and the advantage is
// A = n(F1) + α·n(EM) + β·n(Hit) + n(guard). "normalize_then_sum" is TRL's
// multi_objective_aggregation of that name (GDPO): the same sum, then
// normalized once more over the batch, Â = A / (std_B(A) + ε), std_B over
// the included rollouts (Std "sample": Bessel, as TRL). TRL also subtracts
// the batch mean of A, which is 0 up to rounding (every group's terms are
// centred); leaving it out keeps zero-variance groups at exactly 0. TRL's
// own normalize_then_sum always uses group, sample std and ε = 1e-4 (it
// ignores scale_rewards): Estimator "group", Std "sample", Epsilon 1e-4
// reproduce it.
//
// The estimator (cfg.Estimator, a name in r: group, batch, none, rloo
// built in; greedy through ComputeAdvantagesGreedy) normalizes each
// quantity over a group's valid rollouts. std is the population standard
// deviation (divide by n) with Std "population" — the DeepSeekMath/GRPO
// formulation — or Bessel-corrected
// (divide by n−1, what torch.std and TRL use) with Std "sample". ε
// (Epsilon, default 1e-6) is added to the std, never under the square root,
// so a near-constant group gets large but finite advantages.
//
// A group left with fewer than 2 valid rollouts is dropped (nothing to
// compare). A zero-variance group (see AdvantageStats.ZeroVarGroups) gets
// advantage exactly 0 and stays in the update with ZeroVariance "keep", or is
// dropped with "drop". A term that is constant within a group contributes
// exactly 0, not a rounding residue.
func (r *Registry) ComputeAdvantages(cfg AdvantageConfig, w Weights, groups [][]SampleReward) (Advantages, error) {
	return r.ComputeAdvantagesGreedy(cfg, w, groups, nil)
}

// ComputeAdvantagesGreedy is ComputeAdvantages given also each group's
// greedy rollout, greedy[g] for groups[g], which an estimator with
// UsesGreedy (EstimatorGreedy) takes as its baseline; other estimators
// ignore it (nil is fine for them). Under such an estimator a group needs
// one valid sample, not two, and a valid greedy rollout (a group whose
// greedy rollout failed is dropped: there is nothing to compare with); it
// has zero variance when every term is constant over its valid samples and
// its greedy rollout together.
func (r *Registry) ComputeAdvantagesGreedy(cfg AdvantageConfig, w Weights, groups [][]SampleReward, greedy []SampleReward) (Advantages, error) {
	if err := checkAdvantageInputs(r, cfg, w, groups); err != nil {
		return Advantages{}, err
	}
	est, _ := r.AdvantageEstimator(cfg.Estimator) // checked above
	minValid := 2
	if est.UsesGreedy {
		if len(greedy) != len(groups) {
			return Advantages{}, fmt.Errorf("advantage estimator %q compares each sample with its group's greedy rollout: got %d greedy rollouts for %d groups", cfg.Estimator, len(greedy), len(groups))
		}
		if err := checkTerms(greedy, "greedy rollout of group"); err != nil {
			return Advantages{}, err
		}
		minValid = 1
	} else {
		greedy = nil
	}
	terms := normalizedTerms(cfg, w)
	in := EstimatorInput{SampleStd: cfg.Std == "sample", Epsilon: cfg.Epsilon}
	var batchStd []float64
	if est.UsesBatchStd {
		batchStd = termBatchStds(terms, groups, in.SampleStd)
	}

	out := Advantages{Values: make([][]float64, len(groups)), Include: make([][]bool, len(groups))}
	st := &out.Stats
	st.Groups = len(groups)
	var included, vals []float64
	for g, grp := range groups {
		out.Values[g] = make([]float64, len(grp))
		out.Include[g] = make([]bool, len(grp))
		valid := validRollouts(grp)
		st.FailedRollouts += len(grp) - len(valid)
		var base *SampleReward // the greedy rollout, the baseline of a UsesGreedy estimator
		if greedy != nil {
			if !greedy[g].Valid {
				st.DroppedGroups++
				continue
			}
			base = &greedy[g]
		}
		if len(valid) < minValid {
			st.DroppedGroups++
			continue
		}
		if !countVariance(st, cfg, terms, grp, valid, base) {
			st.DroppedGroups++
			continue
		}
		for t, tm := range terms {
			if constantOver(grp, valid, tm.get, base) {
				continue // contributes exactly 0
			}
			vals = vals[:0]
			for _, i := range valid {
				vals = append(vals, tm.get(grp[i]))
			}
			if batchStd != nil {
				in.BatchStd = batchStd[t]
			}
			if base != nil {
				in.Greedy = tm.get(*base)
			}
			est.Fn(vals, in) // vals are now the term's advantages
			for k, i := range valid {
				out.Values[g][i] += tm.weight * vals[k]
			}
		}
		for _, i := range valid {
			out.Include[g][i] = true
			included = append(included, out.Values[g][i])
		}
	}
	if cfg.Aggregation == "normalize_then_sum" && len(included) > 0 {
		normalizeOverBatch(out, included, in)
	}
	if len(included) > 0 {
		st.Mean, st.Std = stats.MeanStd(included, false)
		for _, a := range included {
			st.AbsMean += math.Abs(a)
		}
		st.AbsMean /= float64(len(included))
	}
	return out, nil
}

// checkAdvantageInputs refuses a config, reward weights or a valid
// rollout's reward terms that would make the advantages meaningless.
func checkAdvantageInputs(r *Registry, cfg AdvantageConfig, w Weights, groups [][]SampleReward) error {
	if err := cfg.ValidateWith(r); err != nil {
		return fmt.Errorf("advantage config: %w", err)
	}
	for _, x := range []struct {
		name string
		v    float64
	}{{"rouge_l", w.rougeL()}, {"alpha", w.Alpha}, {"beta", w.Beta}, {"rank", w.Rank}, {"recall", w.Recall}, {"ndcg", w.NDCG}, {"rr", w.RR}} {
		if math.IsNaN(x.v) || math.IsInf(x.v, 0) || x.v < 0 {
			return fmt.Errorf("reward weight %s must be a finite number ≥ 0, got %v", x.name, x.v)
		}
	}
	for g, grp := range groups {
		if err := checkTerms(grp, fmt.Sprintf("group %d rollout", g)); err != nil {
			return err
		}
	}
	return nil
}

// checkTerms refuses a valid rollout of rs whose reward term is not finite;
// the error names it as what, then its index.
func checkTerms(rs []SampleReward, what string) error {
	for i, s := range rs {
		if !s.Valid {
			continue
		}
		for _, v := range []float64{s.Terms.RougeF1, s.Terms.EM, s.Terms.Hit, s.Terms.Rank, s.Terms.Recall, s.Terms.NDCG, s.Terms.RR, s.guard()} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("%s %d: reward term is %v", what, i, v)
			}
		}
	}
	return nil
}

// termBatchStds is each term's std over every valid rollout of the batch
// (for EstimatorBatch).
func termBatchStds(terms []term, groups [][]SampleReward, sample bool) []float64 {
	out := make([]float64, len(terms))
	for t, tm := range terms {
		var vals []float64
		for _, grp := range groups {
			for _, s := range grp {
				if s.Valid {
					vals = append(vals, tm.get(s))
				}
			}
		}
		_, out[t] = stats.MeanStd(vals, sample)
	}
	return out
}

// validRollouts lists the indices of a group's valid rollouts.
func validRollouts(grp []SampleReward) []int {
	var valid []int
	for i, s := range grp {
		if s.Valid {
			valid = append(valid, i)
		}
	}
	return valid
}

// countVariance counts a comparable group's constant terms in st and
// reports whether the group stays in the update: false for a zero-variance
// group under ZeroVariance "drop". base is the group's greedy rollout for a
// UsesGreedy estimator (nil otherwise), which a term must equal too to be
// constant.
func countVariance(st *AdvantageStats, cfg AdvantageConfig, terms []term, grp []SampleReward, valid []int, base *SampleReward) bool {
	st.ComparableGroups++
	for _, c := range []struct {
		get   func(SampleReward) float64
		count *int
	}{{SampleReward.rougeF1, &st.ZeroVarRougeL}, {SampleReward.em, &st.ZeroVarEM}, {SampleReward.hit, &st.ZeroVarHit}} {
		if constantOver(grp, valid, c.get, base) {
			*c.count++
		}
	}
	if !zeroVariance(terms, grp, valid, base) {
		return true
	}
	st.ZeroVarGroups++
	return cfg.ZeroVariance != "drop"
}

// normalizeOverBatch is TRL's final batch normalization of the summed
// advantages (normalize_then_sum): every included advantage divided by
// their std + ε.
func normalizeOverBatch(out Advantages, included []float64, in EstimatorInput) {
	_, std := stats.MeanStd(included, in.SampleStd)
	scale := 1 / (std + in.Epsilon)
	if math.IsInf(scale, 0) {
		scale = 0 // every included advantage is 0 (ε = 0): nothing to scale
	}
	for g := range out.Values {
		for i, inc := range out.Include[g] {
			if inc {
				out.Values[g][i] *= scale
			}
		}
	}
	for i := range included {
		included[i] *= scale
	}
}

// normalizedTerms lists the quantities that are normalized on their own:
// the total reward with Aggregation "sum", each weighted term with
// "normalize_then_sum".
func normalizedTerms(cfg AdvantageConfig, w Weights) []term {
	if cfg.Aggregation == "sum" {
		return []term{{1, func(s SampleReward) float64 { return s.reward(w) }}}
	}
	var terms []term
	// Rouge-L is left out only when its weight is set to 0 (a pure
	// retrieval reward): a term of weight 0 that varies would make a group
	// count as varying while every advantage is 0.
	if rw := w.rougeL(); rw != 0 {
		terms = append(terms, term{rw, SampleReward.rougeF1})
	}
	terms = append(terms,
		term{w.Alpha, SampleReward.em},
		term{w.Beta, SampleReward.hit},
		term{1, SampleReward.guard},
	)
	// The retrieval terms only when they are on: rollouts of judged turns
	// always carry them, and they must not make an HSER group vary.
	for _, x := range [...]term{{w.Rank, SampleReward.rank}, {w.Recall, SampleReward.recall}, {w.NDCG, SampleReward.ndcg}, {w.RR, SampleReward.rr}} {
		if x.weight != 0 {
			terms = append(terms, x)
		}
	}
	return terms
}

// zeroVariance is the one definition of a zero-variance group: every
// normalized term is constant over the valid rollouts, so every advantage is
// exactly 0. The advantage statistics count such groups and dynamic sampling
// draws them again.
func zeroVariance(terms []term, grp []SampleReward, valid []int, base *SampleReward) bool {
	for _, tm := range terms {
		if !constantOver(grp, valid, tm.get, base) {
			return false
		}
	}
	return true
}

// constantOver reports whether get is the same on every valid rollout of
// grp, and on base when it is not nil (a greedy baseline).
func constantOver(grp []SampleReward, valid []int, get func(SampleReward) float64, base *SampleReward) bool {
	first := get(grp[valid[0]])
	for _, i := range valid[1:] {
		if get(grp[i]) != first {
			return false
		}
	}
	return base == nil || get(*base) == first
}

// TeachesNothing reports whether a group (one prompt's rollouts) yields no
// gradient under cfg: fewer than two valid rollouts to compare, or zero
// variance. Dynamic sampling (DAPO) draws such groups again.
func TeachesNothing(cfg AdvantageConfig, w Weights, grp []SampleReward) bool {
	var valid []int
	for i, s := range grp {
		if s.Valid {
			valid = append(valid, i)
		}
	}
	return len(valid) < 2 || zeroVariance(normalizedTerms(cfg, w), grp, valid, nil)
}
