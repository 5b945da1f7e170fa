package grpo

import (
	"github.com/himes-rl/himes/internal/fielderr"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/trainer"
)

// Config is the "grpo" section: the training loop's knobs. Defaults are in
// DefaultConfig and documented in configs/README.md.
type Config struct {
	// Steps is the number of GRPO steps.
	Steps int `yaml:"steps"`
	// PromptsPerStep is the number of prompts (groups) drawn per step.
	PromptsPerStep int `yaml:"prompts_per_step"`
	// GroupSize is G, the rewrites sampled per prompt.
	GroupSize int `yaml:"group_size"`
	// Temperature of the policy's sampling during GRPO (evaluations are greedy);
	// 0 only without GRPO steps: greedy groups tie and teach nothing.
	Temperature float64 `yaml:"temperature"`
	// TopP is nucleus sampling's p (endpoints that do not support it ignore it).
	TopP float64 `yaml:"top_p"`
	// MaxTokens caps a rewrite's length in tokens (also dr_grpo's L_max).
	MaxTokens int `yaml:"max_tokens"`
	// LearningRate of the policy update (sent to the trainer), in (0, 1]; the peak of
	// grpo.optimizer.schedule.
	LearningRate float64 `yaml:"learning_rate"`
	// Optimizer is the learning-rate schedule and weight decay.
	Optimizer OptimizerConfig `yaml:"optimizer"`
	// Loss is the policy loss every grpo_step carries (trainer.LossConfig;
	// its learning rate, weight decay, max length and temperature come from
	// the keys above). An absent or null key takes the default below, the
	// protocol's too (one table, rlcore.DefaultLoss; clip_high null is the
	// resolved clip_low); a given value is taken literally (clip_low: 0 is
	// the tightest lower clip, every ratio below 1, not none).
	Loss      trainer.LossConfig     `yaml:"loss"`
	Advantage rlcore.AdvantageConfig `yaml:"advantage"`
	// DynamicSampling re-samples groups whose rewards are all equal (DAPO).
	DynamicSampling DynamicSamplingConfig `yaml:"dynamic_sampling"`
	Guards          GuardConfig           `yaml:"guards"`
	SFT             SFTConfig             `yaml:"sft"`
	// EvalEvery steps an evaluation on the held-out split runs (0: only at
	// the start and the end).
	EvalEvery int `yaml:"eval_every"`
	// EvalTurns caps the held-out turns evaluated (0: all).
	EvalTurns int `yaml:"eval_turns"`
	// EvalSamples is how many held-out turns (the first ones, the same at
	// every evaluation) go into each evaluation's samples table
	// (samples/step-NNNNNN-PHASE.parquet, report.html, TensorBoard text):
	// question, policy and gold rewrites, retrieved ids, answer, reward. 0: none.
	EvalSamples int `yaml:"eval_samples"`
	// CheckpointEvery steps the harness and the trainer save state (0: only at the end).
	CheckpointEvery int `yaml:"checkpoint_every"`
	// KeepCheckpoints is how many harness checkpoints to keep (0: all).
	KeepCheckpoints int `yaml:"keep_checkpoints"`
	// LedgerSteps is how many steps one rollout ledger file holds at most
	// (ledger/steps-FIRST-LAST.parquet); a checkpoint and the end of the run
	// also close the file. The steps of the open file are in memory only: a
	// crash loses them, and --resume redoes them (it redoes every step after
	// the checkpoint anyway). 1 writes a file per step.
	LedgerSteps int `yaml:"ledger_steps"`
	// BestMetric keeps the checkpoint with the best value of this evaluation
	// metric outside the keep_checkpoints rotation (state/best.json and its
	// trainer checkpoint; `himes eval --checkpoint best` loads it):
	// eval.policy.<reward|rougeL_f1|em|hit|squad_f1|recall_10|mrr|ndcg_cut_3|failed>,
	// or "" to keep none. An evaluation that sets a new best is checkpointed
	// even between checkpoint_every steps.
	BestMetric string `yaml:"best_metric"`
	// BestMode is max, min, or auto (min for failed, max for the others).
	BestMode string `yaml:"best_mode"`
	// LoadBestAtEnd makes the best checkpoint (best_metric) the run's final
	// policy, as TRL's load_best_model_at_end: loaded into the trainer at
	// the end and named in status.json; `himes eval --run`, `export` and
	// `report` use it unless told --checkpoint latest. Unset (null): on
	// whenever there are held-out turns and a best_metric.
	LoadBestAtEnd *bool `yaml:"load_best_at_end"`
	// OnCollapse is what the run does when the collapse detector (collapse)
	// fires after an evaluation: warn (log a warning naming the step), stop
	// (checkpoint and stop with an error), or rollback (reload the best
	// checkpoint and multiply the learning rate by collapse.lr_factor).
	OnCollapse string `yaml:"on_collapse"`
	// Collapse is the collapse detector's thresholds.
	Collapse CollapseConfig `yaml:"collapse"`
	// GreedyProbe rolls out each step's greedy rewrite of every prompt too
	// (not trained on, not in the ledger) and logs frac_beat_greedy,
	// frac_greedy_best and greedy_reward per step: whether GRPO samples
	// around the policy that is evaluated. Costs one sample call at T = 0 and
	// one rollout per prompt per step (1/group_size more rollouts). Default
	// false; advantage.estimator greedy rolls them out (and logs them) anyway.
	GreedyProbe bool `yaml:"greedy_probe"`
}

// DynamicSamplingConfig bounds DAPO-style re-sampling of zero-variance groups.
type DynamicSamplingConfig struct {
	// MaxRounds of re-sampling per step (0 disables).
	MaxRounds int `yaml:"max_rounds"`
	// MinZeroVarFrac triggers re-sampling when at least this fraction of groups has zero variance.
	MinZeroVarFrac float64 `yaml:"min_zero_var_frac"`
}

// GuardConfig catches reward hacking a rewriter discovers quickly. Each
// guard is "off", "flag" (counted only) or "penalty" (the rollout's reward is
// replaced by Penalty, so the policy is pushed away from it).
type GuardConfig struct {
	// AnswerLeak: the rewrite contains the reference answer and the question does not.
	AnswerLeak string `yaml:"answer_leak"`
	// Empty: the rewrite has no words.
	Empty string `yaml:"empty"`
	// TooLong: the rewrite has more than MaxRewriteWords words.
	TooLong string `yaml:"too_long"`
	// CopiesHistory: the rewrite holds ≥ 90% of the distinct words of a history of ≥ 8 distinct words.
	CopiesHistory string `yaml:"copies_history"`
	// MaxRewriteWords is the too_long limit.
	MaxRewriteWords int `yaml:"max_rewrite_words"`
	// Penalty replaces the reward of a rollout caught by a guard in penalty mode.
	Penalty float64 `yaml:"penalty"`
}

// SFTConfig is the optional supervised phase before GRPO.
type SFTConfig struct {
	// Epochs over the (prompt, human rewrite) pairs; 0 skips SFT.
	Epochs int `yaml:"epochs"`
	// BatchSize is the number of pairs per sft_step call.
	BatchSize int `yaml:"batch_size"`
	// LearningRate of the SFT updates, in (0, 1].
	LearningRate float64 `yaml:"learning_rate"`
}

// maxLearningRate bounds both learning rates: far above any real run (LoRA
// uses ~1e-5, the embedded policy's Adam 0.1), below where updates overflow.
const maxLearningRate = 1.0

// Upper bounds on sizes: a typo such as group_size 1e9 must fail validation,
// not exhaust memory at step 1. They are far above any real run.
const (
	maxSteps           = 1_000_000
	maxGroupSize       = 1024
	maxRolloutsPerStep = 1 << 18 // prompts_per_step × group_size; also SFT's batch
	maxTokens          = 1 << 15
	maxLedgerSteps     = 10_000
)

// DefaultConfig returns the documented defaults.
func DefaultConfig() Config {
	return Config{
		Steps: 50, PromptsPerStep: 8, GroupSize: 8, Temperature: 1.0, TopP: 1.0, MaxTokens: 64,
		LearningRate:    1e-5,
		Optimizer:       DefaultOptimizerConfig(),
		Loss:            defaultLoss(),
		Advantage:       rlcore.DefaultAdvantageConfig(),
		DynamicSampling: DynamicSamplingConfig{MaxRounds: 0, MinZeroVarFrac: 0.5},
		Guards: GuardConfig{AnswerLeak: "penalty", Empty: "penalty", TooLong: "penalty", CopiesHistory: "flag",
			MaxRewriteWords: 64, Penalty: -1},
		SFT:             SFTConfig{Epochs: 0, BatchSize: 32, LearningRate: 1e-4},
		EvalEvery:       10,
		EvalSamples:     8,
		CheckpointEvery: 10,
		KeepCheckpoints: 3,
		LedgerSteps:     25,
		BestMetric:      "eval.policy.reward",
		BestMode:        "auto",
		OnCollapse:      CollapseWarn,
		Collapse:        DefaultCollapseConfig(),
	}
}

// Validate checks ranges and modes.
func (c Config) Validate() error {
	switch {
	case c.Steps < 0 || c.Steps > maxSteps:
		return fielderr.New("steps", "must be in [0, %d], got %d", maxSteps, c.Steps)
	case c.PromptsPerStep < 1 || c.PromptsPerStep > maxRolloutsPerStep:
		return fielderr.New("prompts_per_step", "must be in [1, %d], got %d", maxRolloutsPerStep, c.PromptsPerStep)
	case c.GroupSize < 2:
		return fielderr.New("group_size", "must be ≥ 2 (GRPO compares rewrites within a group), got %d", c.GroupSize)
	case c.GroupSize > maxGroupSize:
		return fielderr.New("group_size", "must be ≤ %d, got %d", maxGroupSize, c.GroupSize)
	case c.PromptsPerStep*c.GroupSize > maxRolloutsPerStep:
		return fielderr.New("group_size", "prompts_per_step × group_size = %d rollouts per step, more than the %d a step holds in memory",
			c.PromptsPerStep*c.GroupSize, maxRolloutsPerStep)
	case c.Temperature < 0:
		return fielderr.New("temperature", "must be ≥ 0, got %v", c.Temperature)
	case c.Temperature == 0 && c.Steps > 0:
		// Greedy sampling draws one rewrite group_size times: every group
		// ties, every advantage is 0, and the steps run without an update.
		return fielderr.New("temperature", "is 0 with %d GRPO steps: every sample is the greedy rewrite, so each group ties and GRPO learns nothing; sample at > 0 (default 1)", c.Steps)
	case c.TopP <= 0 || c.TopP > 1:
		return fielderr.New("top_p", "must be in (0, 1], got %v", c.TopP)
	case c.MaxTokens < 1 || c.MaxTokens > maxTokens:
		return fielderr.New("max_tokens", "must be in [1, %d], got %d", maxTokens, c.MaxTokens)
	case !(c.LearningRate > 0 && c.LearningRate <= maxLearningRate):
		// 1e100 trained and exited 0, 1e200 overflowed to +Inf mid-run
		// (item 6 of issue 33); every shipped config is ≤ 0.1.
		return fielderr.New("learning_rate", "must be in (0, %v], got %v", maxLearningRate, c.LearningRate)
	case c.EvalEvery < 0:
		return fielderr.New("eval_every", "must be ≥ 0, got %d", c.EvalEvery)
	case c.EvalTurns < 0:
		return fielderr.New("eval_turns", "must be ≥ 0, got %d", c.EvalTurns)
	case c.EvalSamples < 0:
		return fielderr.New("eval_samples", "must be ≥ 0, got %d", c.EvalSamples)
	case c.CheckpointEvery < 0:
		return fielderr.New("checkpoint_every", "must be ≥ 0, got %d", c.CheckpointEvery)
	case c.KeepCheckpoints < 0:
		return fielderr.New("keep_checkpoints", "must be ≥ 0, got %d", c.KeepCheckpoints)
	case c.LedgerSteps < 1 || c.LedgerSteps > maxLedgerSteps:
		return fielderr.New("ledger_steps", "must be in [1, %d], got %d", maxLedgerSteps, c.LedgerSteps)
	}
	switch c.BestMode {
	case "auto", "max", "min":
	default:
		return fielderr.New("best_mode", "must be auto, max or min, got %q", c.BestMode)
	}
	if c.BestMetric != "" {
		if _, _, err := bestMetric(c.BestMetric, c.BestMode); err != nil {
			return err
		}
	}
	if err := validateOnCollapse(c.OnCollapse); err != nil {
		return err
	}
	if err := c.Collapse.validate(); err != nil {
		return fielderr.Prefix("collapse", err)
	}
	if c.OnCollapse == CollapseRollback && c.BestMetric == "" {
		return fielderr.New("on_collapse", "rollback needs a best checkpoint to roll back to: set grpo.best_metric")
	}
	if c.LoadBestAtEnd != nil && *c.LoadBestAtEnd && c.BestMetric == "" {
		return fielderr.New("load_best_at_end", "needs grpo.best_metric (which checkpoint is best)")
	}
	if err := c.Optimizer.validate(c.Steps); err != nil {
		return fielderr.Prefix("optimizer", err)
	}
	if err := c.validateLoss(); err != nil {
		return fielderr.Prefix("loss", err)
	}
	if err := c.Advantage.Validate(); err != nil {
		return fielderr.Prefix("advantage", err)
	}
	if r := c.DynamicSampling.MaxRounds; r < 0 || r > 100 {
		return fielderr.New("dynamic_sampling.max_rounds", "must be in [0, 100], got %d", r)
	}
	if f := c.DynamicSampling.MinZeroVarFrac; f < 0 || f > 1 {
		return fielderr.New("dynamic_sampling.min_zero_var_frac", "must be in [0, 1], got %v", f)
	}
	if c.Advantage.Estimator == rlcore.EstimatorGreedy && c.DynamicSampling.MaxRounds > 0 {
		// Dynamic sampling re-draws a group whose samples all tie, before
		// the greedy rollout exists; against the greedy baseline such a
		// group may still teach.
		return fielderr.New("dynamic_sampling.max_rounds", "must be 0 with advantage.estimator greedy (it compares the samples with the greedy rollout, not with each other), got %d", c.DynamicSampling.MaxRounds)
	}
	if err := c.Guards.validate(); err != nil {
		return fielderr.Prefix("guards", err)
	}
	if c.SFT.Epochs < 0 {
		return fielderr.New("sft.epochs", "must be ≥ 0, got %d", c.SFT.Epochs)
	}
	if c.SFT.BatchSize > maxRolloutsPerStep {
		return fielderr.New("sft.batch_size", "must be ≤ %d, got %d", maxRolloutsPerStep, c.SFT.BatchSize)
	}
	if c.SFT.LearningRate < 0 || c.SFT.LearningRate > maxLearningRate {
		return fielderr.New("sft.learning_rate", "must be in (0, %v], got %v", maxLearningRate, c.SFT.LearningRate)
	}
	if c.SFT.Epochs > 0 && (c.SFT.BatchSize < 1 || c.SFT.LearningRate <= 0) {
		return fielderr.New("sft", "batch_size must be ≥ 1 and learning_rate > 0 when epochs > 0")
	}
	return nil
}

// maxMu bounds grpo.loss.mu: a typo such as mu 1e4 must fail validation, not
// run ten thousand optimizer steps per batch.
const maxMu = 100

// defaultLoss is grpo.loss's defaults (rlcore.DefaultLoss, the protocol's
// too), every key set but clip_high, whose default is the resolved clip_low
// (what configs/README.md and a run's config.yaml show).
func defaultLoss() trainer.LossConfig {
	d := trainer.LossConfig{}.WithDefaults()
	// clip_high follows clip_low; the rest are set per step from other grpo
	// keys, not grpo.loss keys.
	d.ClipHigh, d.WeightDecay, d.MaxLength, d.Temperature = nil, nil, nil, nil
	return d
}

// ResolvedLoss is grpo.loss as a grpo_step carries it at the peak learning
// rate: every unset (null) key at its default, learning_rate,
// optimizer.weight_decay, max_tokens (dr_grpo's L_max) and the sampling
// temperature filled in, validated by trainer.LossConfig.Resolve. It is the
// one place grpo.loss is resolved: Validate checks its result, and the loop
// sends it with each step's learning rate.
func (c Config) ResolvedLoss() (trainer.ResolvedLoss, error) {
	lc := c.Loss
	// Samples drawn at temperature 0 (greedy) carry logprobs under T = 1
	// (PROTOCOL.md, "sample"), so the loss recomputes them at 1.
	temp := c.Temperature
	if temp == 0 {
		temp = 1
	}
	lc.LearningRate, lc.WeightDecay, lc.MaxLength, lc.Temperature = new(c.LearningRate), new(c.Optimizer.WeightDecay), new(c.MaxTokens), new(temp)
	return lc.Resolve()
}

// validateLoss checks grpo.loss; the fields set from other keys were
// checked with them.
func (c Config) validateLoss() error {
	l, err := c.ResolvedLoss()
	if err != nil {
		return err
	}
	if l.Mu > maxMu {
		return fielderr.New("mu", "must be in [1, %d], got %d", maxMu, l.Mu)
	}
	return nil
}

// mode is the mode of the guard named name ("off" for a guard with no key
// here).
func (g GuardConfig) mode(name string) string {
	switch name {
	case rlcore.GuardAnswerLeak:
		return g.AnswerLeak
	case rlcore.GuardEmpty:
		return g.Empty
	case rlcore.GuardTooLong:
		return g.TooLong
	case rlcore.GuardCopiesHistory:
		return g.CopiesHistory
	}
	return "off"
}

func (g GuardConfig) validate() error {
	for _, m := range []struct{ key, v string }{
		{"answer_leak", g.AnswerLeak}, {"empty", g.Empty}, {"too_long", g.TooLong}, {"copies_history", g.CopiesHistory},
	} {
		switch m.v {
		case "off", "flag", "penalty":
		default:
			return fielderr.New(m.key, "must be off, flag or penalty, got %q", m.v)
		}
	}
	if g.MaxRewriteWords < 1 {
		return fielderr.New("max_rewrite_words", "must be ≥ 1, got %d", g.MaxRewriteWords)
	}
	return nil
}
