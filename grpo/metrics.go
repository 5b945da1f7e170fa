package grpo

// Terms are the mean reward and its terms over a set of rollouts or turns.
type Terms struct {
	Reward   float64 `json:"reward"`
	RougeLF1 float64 `json:"rougeL_f1"`
	EM       float64 `json:"em"`
	Hit      float64 `json:"hit"`
	SquadF1  float64 `json:"squad_f1"`
}

// StepMetrics is one "step" line of metrics.jsonl.
type StepMetrics struct {
	Kind          string  `json:"kind"` // "step"
	Step          int     `json:"step"`
	PolicyVersion int64   `json:"policy_version"`
	Epoch         int     `json:"epoch"`
	Rollouts      int     `json:"rollouts"`
	RewardMean    float64 `json:"reward_mean"`
	RewardStd     float64 `json:"reward_std"`
	Terms         Terms   `json:"terms"` // means over valid rollouts

	// Zero-variance groups, as a fraction of the groups with ≥ 2 valid
	// rollouts: overall (total reward) and per term.
	ZeroVarFrac       float64 `json:"zero_var_frac"`
	ZeroVarFracRougeL float64 `json:"zero_var_frac_rougeL"`
	ZeroVarFracEM     float64 `json:"zero_var_frac_em"`
	ZeroVarFracHit    float64 `json:"zero_var_frac_hit"`
	DroppedGroups     int     `json:"dropped_groups"`
	FailedRollouts    int     `json:"failed_rollouts"`
	ResampledGroups   int     `json:"resampled_groups"`
	AdvantageMean     float64 `json:"adv_mean"`
	AdvantageStd      float64 `json:"adv_std"`
	AdvantageAbsMean  float64 `json:"adv_abs_mean"`
	Loss              float64 `json:"loss"`
	KL                float64 `json:"kl"`
	ClipFracLow       float64 `json:"clip_frac_low"`
	ClipFracHigh      float64 `json:"clip_frac_high"`
	GradNorm          float64 `json:"grad_norm"`
	Entropy           float64 `json:"entropy"`
	RewriteLenMean    float64 `json:"rewrite_len_mean"` // words
	DedupHits         int     `json:"dedup_hits"`
	// CacheHits counts answers reused from the answer cache: deterministic
	// while the cache holds the run's distinct prompts; once it evicts, which
	// entries survive depends on goroutine timing.
	CacheHits          int     `json:"cache_hits"`
	GuardLeak          int     `json:"guard_answer_leak"`
	GuardEmpty         int     `json:"guard_empty"`
	GuardTooLong       int     `json:"guard_too_long"`
	GuardCopiesHistory int     `json:"guard_copies_history"`
	SampleSeconds      float64 `json:"t_sample_s"`
	RetrieveSeconds    float64 `json:"t_retrieve_s"`
	RespondSeconds     float64 `json:"t_respond_s"`
	ScoreSeconds       float64 `json:"t_score_s"`
	UpdateSeconds      float64 `json:"t_update_s"`
	StepSeconds        float64 `json:"t_step_s"`
}

// EvalSystem is the evaluation of one rewriter on the held-out split. The
// reward terms are means over the Compared turns (those both systems
// completed); Recall10 and MRR over every judged turn.
type EvalSystem struct {
	Terms
	Recall10 float64 `json:"recall_10"`
	MRR      float64 `json:"mrr"`
	Turns    int     `json:"turns"`    // turns evaluated
	Failed   int     `json:"failed"`   // turns whose rollout failed for this system
	Compared int     `json:"compared"` // turns the terms average over
}

// EvalMetrics is one "eval" line of metrics.jsonl: the policy (greedy) and
// the raw question as a fixed baseline, on the same held-out turns.
type EvalMetrics struct {
	Kind string `json:"kind"` // "eval"
	Step int    `json:"step"`
	// Phase is "init" (before any training), "sft" (after the SFT phase,
	// before GRPO) or "grpo".
	Phase string `json:"phase"`
	// Turns evaluated, and Compared: those both systems completed, over
	// which both systems' reward terms are averaged.
	Turns    int        `json:"n_turns"`
	Compared int        `json:"n_compared"`
	Policy   EvalSystem `json:"policy"`
	Raw      EvalSystem `json:"raw"`
}

// SFTMetrics is one "sft" line of metrics.jsonl: an epoch of the SFT phase.
type SFTMetrics struct {
	Kind     string  `json:"kind"` // "sft"
	Step     int     `json:"step"` // always 0: SFT precedes GRPO step 1
	Epoch    int     `json:"epoch"`
	Examples int     `json:"examples"`
	Loss     float64 `json:"loss"`
}
