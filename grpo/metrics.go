package grpo

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"time"
)

// Terms are the mean reward and its terms over a set of rollouts or turns.
// RougeLF1, EM and Hit are the answers' real scores, guarded rollouts
// included; GuardPenalty is the mean guard_penalty term (0 for a rollout no
// guard penalized, whose reward it replaces otherwise; always 0 in evals).
// EM is the reward's (normalized as reward.tokenizer says); SquadEM and
// SquadF1 are the official SQuAD v1.1 numbers, reported only.
type Terms struct {
	Reward       float64 `json:"reward"`
	RougeLF1     float64 `json:"rougeL_f1"`
	EM           float64 `json:"em"`
	Hit          float64 `json:"hit"`
	SquadEM      float64 `json:"squad_em"`
	SquadF1      float64 `json:"squad_f1"`
	GuardPenalty float64 `json:"guard_penalty"`
	// The retrieval terms that enter R (their reward weight is non-zero),
	// over the valid rollouts of judged turns: the rank-incentive reward,
	// Recall@k, NDCG@k and reciprocal rank of each rollout's own ranking.
	// Absent when the term is not in R or no valid rollout was judged.
	RankReward *float64 `json:"rank_reward,omitempty"`
	RecallK    *float64 `json:"recall_k,omitempty"`
	NDCGK      *float64 `json:"ndcg_k,omitempty"`
	RR         *float64 `json:"rr,omitempty"`
}

// Stamp says when a metrics line was written: wall-clock time (RFC 3339, UTC)
// and the seconds of training before it, summed over resumed sessions (time
// lost to a crash after the last checkpoint is not counted).
type Stamp struct {
	Time           time.Time `json:"time"`
	ElapsedSeconds float64   `json:"elapsed_s"`
}

// A metric that was not computed is a nil pointer, absent from the JSON line
// (omitempty): never a 0 that reads as a measurement. Fields marked
// "absent when …" below say when.

// StepMetrics is one "step" line of metrics.jsonl.
type StepMetrics struct {
	Kind string `json:"kind"` // "step"
	Stamp
	Step          int   `json:"step"`
	PolicyVersion int64 `json:"policy_version"`
	Epoch         int   `json:"epoch"`
	Rollouts      int   `json:"rollouts"`
	// LR is the learning rate sent with the step's update (the schedule's).
	LR float64 `json:"lr"`
	// RewardMean, RewardStd and Terms are over the valid rollouts; absent
	// when every rollout of the step failed.
	RewardMean *float64 `json:"reward_mean,omitempty"`
	RewardStd  *float64 `json:"reward_std,omitempty"`
	Terms      *Terms   `json:"terms,omitempty"`

	// Zero-variance groups, as a fraction of the groups with ≥ 2 valid
	// rollouts: overall (total reward) and per term; absent when no group
	// has 2 valid rollouts.
	ZeroVarFrac       *float64 `json:"zero_var_frac,omitempty"`
	ZeroVarFracRougeL *float64 `json:"zero_var_frac_rougeL,omitempty"`
	ZeroVarFracEM     *float64 `json:"zero_var_frac_em,omitempty"`
	ZeroVarFracHit    *float64 `json:"zero_var_frac_hit,omitempty"`
	DroppedGroups     int      `json:"dropped_groups"`
	FailedRollouts    int      `json:"failed_rollouts"`
	ResampledGroups   int      `json:"resampled_groups"`

	// ConstantTerms names the weighted reward terms that had one value on
	// every valid rollout of the step (they cannot rank rewrites; the run
	// logs a WARN with the likely cause); absent when none.
	ConstantTerms []string `json:"constant_terms,omitempty"`
	// Advantages of the included samples; absent when none is included.
	AdvantageMean    *float64 `json:"adv_mean,omitempty"`
	AdvantageStd     *float64 `json:"adv_std,omitempty"`
	AdvantageAbsMean *float64 `json:"adv_abs_mean,omitempty"`
	// The trainer's report of the update; all absent when no update was sent
	// (every group dropped). KL is absent when kl_coef is 0 (the trainer
	// skips the reference), Entropy when the endpoint does not compute it
	// (capabilities.entropy false).
	Loss         *float64 `json:"loss,omitempty"`
	KL           *float64 `json:"kl,omitempty"`
	ClipFracLow  *float64 `json:"clip_frac_low,omitempty"`
	ClipFracHigh *float64 `json:"clip_frac_high,omitempty"`
	// ClipFracDual is absent unless dual clip is on (loss.clip_ratio_c > 0).
	ClipFracDual *float64 `json:"clip_frac_dual,omitempty"`
	GradNorm     *float64 `json:"grad_norm,omitempty"`
	Entropy      *float64 `json:"entropy,omitempty"`
	// KLMeasured is the KL to the reference when kl_coef is 0: measured by
	// an endpoint with capabilities.kl_measured, not a term of the loss
	// (with kl_coef > 0 it is KL above); absent otherwise.
	KLMeasured *float64 `json:"kl_measured,omitempty"`
	// WeightNorm (L2, bias left out) and Bias of the updated policy, from an
	// endpoint that reports them (the embedded policy); absent otherwise.
	WeightNorm *float64 `json:"weight_norm,omitempty"`
	Bias       *float64 `json:"bias,omitempty"`
	// FracBeatGreedy is the share of the step's valid sampled rollouts whose
	// reward exceeds the greedy rewrite's of their prompt, FracGreedyBest the
	// share of prompts whose greedy rewrite ties or beats every sample, and
	// GreedyReward the greedy rollouts' mean reward (grpo.greedy_probe;
	// absent without it).
	FracBeatGreedy *float64 `json:"frac_beat_greedy,omitempty"`
	FracGreedyBest *float64 `json:"frac_greedy_best,omitempty"`
	GreedyReward   *float64 `json:"greedy_reward,omitempty"`
	// OptimizerReset: this step's update started from a fresh optimizer
	// (the first GRPO step after SFT, grpo.optimizer.reset); absent otherwise.
	OptimizerReset bool    `json:"optimizer_reset,omitempty"`
	RewriteLenMean float64 `json:"rewrite_len_mean"` // words
	DedupHits      int     `json:"dedup_hits"`
	// CacheHits counts answers reused from the answer cache: deterministic
	// while the cache holds the run's distinct prompts; once it evicts, which
	// entries survive depends on goroutine timing.
	CacheHits          int `json:"cache_hits"`
	GuardLeak          int `json:"guard_answer_leak"`
	GuardEmpty         int `json:"guard_empty"`
	GuardTooLong       int `json:"guard_too_long"`
	GuardCopiesHistory int `json:"guard_copies_history"`
	// Wall-clock shares of the step, one stage after the other: t_sample_s
	// + t_retrieve_s + t_respond_s + t_score_s + t_update_s + t_other_s =
	// t_step_s. t_retrieve_s, t_respond_s and t_score_s are the rollout
	// runner's phases (retrieval of the step's rewrites in one batch,
	// responder calls, scoring; t_score_s also the advantages); before
	// issue 37 they were the sums below under these names.
	SampleSeconds   float64 `json:"t_sample_s"`
	RetrieveSeconds float64 `json:"t_retrieve_s"`
	RespondSeconds  float64 `json:"t_respond_s"`
	ScoreSeconds    float64 `json:"t_score_s"`
	UpdateSeconds   float64 `json:"t_update_s"`
	OtherSeconds    float64 `json:"t_other_s"`
	StepSeconds     float64 `json:"t_step_s"`
	// The rollout stages summed over the step's rollouts (concurrent ones
	// add up, so these can exceed t_step_s): the work done, not the wait.
	RetrieveSumSeconds float64 `json:"t_retrieve_sum_s"`
	RespondSumSeconds  float64 `json:"t_respond_sum_s"`
	ScoreSumSeconds    float64 `json:"t_score_sum_s"`
}

// Interval is a confidence interval.
type Interval struct {
	Lo float64 `json:"lo"`
	Hi float64 `json:"hi"`
}

// EvalCI holds 95% cluster-bootstrap intervals (conversations resampled,
// internal/stats) of an EvalSystem's means; a metric's interval is absent
// when the metric is.
type EvalCI struct {
	Reward   *Interval `json:"reward,omitempty"`
	Recall10 *Interval `json:"recall_10,omitempty"`
	MRR      *Interval `json:"mrr,omitempty"`
	NDCG3    *Interval `json:"ndcg_cut_3,omitempty"`
	SquadF1  *Interval `json:"squad_f1,omitempty"`
}

// EvalSystem is the evaluation of one rewriter on the held-out split. The
// reward terms are means over the Compared turns (those both systems
// completed; an evaluation in which none is is an error, not a row of
// zeros); Recall10, MRR and NDCG3 over every judged turn.
type EvalSystem struct {
	Terms
	// Recall10, MRR and NDCG3 (trec_eval's ndcg_cut_3, graded by the
	// judgments) are over the turns with gold passages; absent when there
	// is no ranker or no turn has gold passages.
	Recall10 *float64 `json:"recall_10,omitempty"`
	MRR      *float64 `json:"mrr,omitempty"`
	NDCG3    *float64 `json:"ndcg_cut_3,omitempty"`
	CI       EvalCI   `json:"ci"`
	// AddsNothing is the share of the evaluated turns whose greedy rewrite
	// is the raw question (up to case and spacing): 1 means the policy
	// collapsed to not rewriting (grpo.collapse). Policy only; absent for raw.
	AddsNothing *float64 `json:"adds_nothing,omitempty"`
	Turns       int      `json:"turns"`    // turns evaluated
	Failed      int      `json:"failed"`   // turns whose rollout failed for this system
	Compared    int      `json:"compared"` // turns the terms average over
}

// EvalMetrics is one "eval" line of metrics.jsonl: the policy (greedy) and
// the raw question as a fixed baseline, on the same held-out turns.
type EvalMetrics struct {
	Kind string `json:"kind"` // "eval"
	Stamp
	Step int `json:"step"`
	// Phase is "init" (before any training), "sft" (after the SFT phase,
	// before GRPO) or "grpo".
	Phase string `json:"phase"`
	// Turns evaluated, and Compared: those both systems completed, over
	// which both systems' reward terms are averaged.
	Turns    int        `json:"n_turns"`
	Compared int        `json:"n_compared"`
	Policy   EvalSystem `json:"policy"`
	Raw      EvalSystem `json:"raw"`
	// ConstantTerms: the weighted reward terms with one value on every valid
	// rollout of the evaluation, both systems together; absent when none.
	ConstantTerms []string `json:"constant_terms,omitempty"`
	// Collapse names why this evaluation counts as a collapse
	// (grpo.collapse); absent when it does not.
	Collapse string `json:"collapse,omitempty"`
}

// SFTMetrics is one "sft" line of metrics.jsonl: an epoch of the SFT phase.
type SFTMetrics struct {
	Kind string `json:"kind"` // "sft"
	Stamp
	Step     int     `json:"step"` // always 0: SFT precedes GRPO step 1
	Epoch    int     `json:"epoch"`
	Examples int     `json:"examples"`
	Loss     float64 `json:"loss"`
	LR       float64 `json:"lr"`
}

// Val is the value of an optional metric, NaN when it was not computed (so
// means and plots skip it instead of averaging a 0).
func Val(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

func ptr(v float64) *float64 { return &v }

// Scalar is one named number of a metrics line.
type Scalar struct {
	Name  string
	Value float64
}

// Flatten lists the numbers of a metrics line under their metrics.jsonl
// names, nested keys joined with '/' and prefixed with the line's kind
// ("step/terms/rougeL_f1", "eval/policy/recall_10"), in name order. Strings
// (kind, phase, time) and the step itself are left out; absent metrics have
// no entry. TensorBoard tags use these names.
func Flatten(line any) ([]Scalar, error) {
	b, err := json.Marshal(line)
	if err != nil {
		return nil, fmt.Errorf("flatten metrics: %w", err)
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("flatten metrics: %w", err)
	}
	kind, _ := m["kind"].(string)
	if kind == "" {
		return nil, fmt.Errorf("flatten metrics: %T has no kind", line)
	}
	delete(m, "kind")
	delete(m, "step")
	var out []Scalar
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch x := v.(type) {
		case float64:
			out = append(out, Scalar{prefix, x})
		case bool:
			if x {
				out = append(out, Scalar{prefix, 1})
			} else {
				out = append(out, Scalar{prefix, 0})
			}
		case map[string]any:
			for k, e := range x {
				walk(prefix+"/"+k, e)
			}
		}
	}
	walk(kind, m)
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}
