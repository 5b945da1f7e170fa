package datasets

import (
	"fmt"
	"strings"

	"github.com/himes-rl/himes/internal/fielderr"
)

// Config selects the data a run trains and evaluates on, and how prompts
// for the rewriter are rendered. The datasets package owns these knobs.
type Config struct {
	// Train is the GRPO prompt set (normalized JSONL or Parquet).
	Train string `yaml:"train"`
	// Eval is the held-out set; empty means split EvalFraction off Train by conversation.
	Eval string `yaml:"eval"`
	// EvalFraction of conversations held out when Eval is empty.
	EvalFraction float64 `yaml:"eval_fraction"`
	// DevFraction of the training conversations carved out as an in-domain
	// dev split (by conversation, seeded with run.seed): when > 0 the
	// training loop's evaluations and its best checkpoint use the dev split,
	// never data.eval, which stays the test set of `himes eval`. 0 = off: the
	// loop evaluates on data.eval (or the data.eval_fraction split).
	DevFraction float64 `yaml:"dev_fraction"`
	// DevGroup stratifies the dev split: "" takes dev_fraction of all the
	// training conversations at once (a file of several collections may then
	// give dev none of one of them); "meta.<key>" takes dev_fraction of each
	// group's conversations, e.g. meta.transfer_collection, which `himes ablate
	// transfer` writes on every turn of a fold's training file, so each
	// training collection is in dev. A turn without the key is an error.
	DevGroup string `yaml:"dev_group"`
	// SFT is the supervised (prompt, rewrite) data; empty means derive it from Train.
	SFT string `yaml:"sft"`
	// KB is the knowledge base of passages (JSONL or Parquet).
	KB string `yaml:"kb"`
	// UserField names what identifies a long-term-memory user: conv_id, topic, or meta.<column>.
	UserField string `yaml:"user_field"`
	// MemoryField names a per-turn field holding the user's statements, a
	// map id → text or a list of texts (meta.<key>, e.g. meta.ptkb for TREC
	// iKAT): long-term memories the user has from the start, next to the
	// questions they asked earlier. "" = none.
	MemoryField string `yaml:"memory_field"`
	// MemoryLabelsField names a per-turn list of the ids of the memories
	// judged relevant at that turn (meta.<key>, e.g. meta.ptkb_provenance):
	// `himes eval` then measures activation (memory precision, recall, MRR).
	// "" = no labels.
	MemoryLabelsField string `yaml:"memory_labels_field"`
	// Format of the input files: "" (by extension and content), jsonl,
	// parquet, qrecc or topiocqa.
	Format string `yaml:"format"`
	// SkipBad skips invalid input records (counted and logged) instead of failing.
	SkipBad bool `yaml:"skip_bad"`
	// JudgedOnly keeps as GRPO prompts and held-out turns only the turns
	// with relevance judgments (qrels); the others still give the later
	// turns their history. What reward.rank needs on collections where
	// some turns are unjudged (default false: every turn with an answer).
	JudgedOnly bool `yaml:"judged_only"`
	// Columns renames the fields (JSONL) or columns (Parquet) of a foreign
	// export to the normalized schema: normalized name → the file's name,
	// e.g. {question: query, history: context} for a Hugging Face dataset
	// saved to Parquet. History messages may be {role, text} or {role,
	// content} either way.
	Columns map[string]string `yaml:"columns"`
	// MaxFieldBytes bounds every text field of an input record (question,
	// history message, passage text, ...); a longer one makes the record
	// invalid (default 256 KiB).
	MaxFieldBytes int `yaml:"max_field_bytes"`
	// MaxRecordBytes bounds one input record (a JSONL line; default 16 MiB).
	MaxRecordBytes int `yaml:"max_record_bytes"`
	// Prompt renders the rewriter's input.
	Prompt PromptConfig `yaml:"prompt"`
	// Prep configures `himes prep sft` and `himes prep rl`.
	Prep PrepConfig `yaml:"prep"`
}

// PrepConfig are the knobs of SFT and RL data preparation.
type PrepConfig struct {
	// NoRewriteRatio is the share of "no rewrite needed" examples in the SFT
	// set (completion = the question itself). Turns whose reference rewrite
	// equals the question supply them first; when there are too few, turns
	// are added with their self-contained reference rewrite as the question.
	// 0 drops identity examples altogether.
	NoRewriteRatio float64 `yaml:"no_rewrite_ratio" json:"no_rewrite_ratio"`
	// MaxPromptChars drops SFT pairs whose flat prompt is longer; 0 = no limit.
	MaxPromptChars int `yaml:"max_prompt_chars" json:"max_prompt_chars"`
	// MaxCompletionChars drops SFT pairs whose completion is longer; 0 = no limit.
	MaxCompletionChars int `yaml:"max_completion_chars" json:"max_completion_chars"`
	// ValFraction of the split keys (conversations by default) held out for validation.
	ValFraction float64 `yaml:"val_fraction" json:"val_fraction"`
	// SplitBy is the key that must not straddle train and validation:
	// conv_id, user (the user_field key), topic or meta.<key>. Use topic for
	// CAsT 2022, whose flattened tree paths share their first turns.
	SplitBy string `yaml:"split_by" json:"split_by"`
	// RequirePassages keeps only turns with gold passages in the RL set.
	RequirePassages bool `yaml:"require_passages" json:"require_passages"`
}

// DefaultPrepConfig returns the documented defaults.
func DefaultPrepConfig() PrepConfig {
	return PrepConfig{
		NoRewriteRatio:     0.2,
		MaxPromptChars:     8000,
		MaxCompletionChars: 400,
		ValFraction:        0.1,
		SplitBy:            "conv_id",
	}
}

// Validate checks ranges.
func (c PrepConfig) Validate() error {
	if c.NoRewriteRatio < 0 || c.NoRewriteRatio >= 1 {
		return fielderr.New("no_rewrite_ratio", "must be in [0, 1), got %v", c.NoRewriteRatio)
	}
	if c.MaxPromptChars < 0 {
		return fielderr.New("max_prompt_chars", "must be ≥ 0 (0 = no limit), got %d", c.MaxPromptChars)
	}
	if c.MaxCompletionChars < 0 {
		return fielderr.New("max_completion_chars", "must be ≥ 0 (0 = no limit), got %d", c.MaxCompletionChars)
	}
	if c.ValFraction < 0 || c.ValFraction >= 1 {
		return fielderr.New("val_fraction", "must be in [0, 1), got %v", c.ValFraction)
	}
	if err := validKeyName(c.SplitBy, true); err != nil {
		return fielderr.New("split_by", "%v", err)
	}
	return nil
}

// DefaultConfig returns the defaults documented in configs/README.md.
func DefaultConfig() Config {
	return Config{EvalFraction: 0.2, UserField: "conv_id", MaxFieldBytes: DefaultMaxFieldBytes, MaxRecordBytes: DefaultMaxRecordBytes,
		Prompt: DefaultPromptConfig(), Prep: DefaultPrepConfig()}
}

// Validate checks ranges and that a training file is named; file existence
// is checked by the loaders.
func (c Config) Validate() error {
	if c.Train == "" {
		return fielderr.New("train", "is required")
	}
	return c.ValidateSettings()
}

// ValidateSettings is Validate without asking for a training file, for a
// command that may never read one.
func (c Config) ValidateSettings() error {
	if c.EvalFraction < 0 || c.EvalFraction >= 1 {
		return fielderr.New("eval_fraction", "must be in [0, 1), got %v", c.EvalFraction)
	}
	if c.DevFraction < 0 || c.DevFraction >= 1 {
		return fielderr.New("dev_fraction", "must be in [0, 1), got %v", c.DevFraction)
	}
	if c.DevGroup != "" && (!strings.HasPrefix(c.DevGroup, "meta.") || c.DevGroup == "meta.") {
		return fielderr.New("dev_group", `want "" or meta.<key>, got %q`, c.DevGroup)
	}
	if err := validKeyName(c.UserField, false); err != nil {
		return fielderr.New("user_field", "%v", err)
	}
	if _, err := memoryFieldKey(c.MemoryField); c.MemoryField != "" && err != nil {
		return fielderr.New("memory_field", "%v", err)
	}
	if _, err := memoryFieldKey(c.MemoryLabelsField); c.MemoryLabelsField != "" && err != nil {
		return fielderr.New("memory_labels_field", "%v", err)
	}
	if c.MaxFieldBytes < 1 || c.MaxFieldBytes > 1<<30 {
		return fielderr.New("max_field_bytes", "must be in [1, %d], got %d", 1<<30, c.MaxFieldBytes)
	}
	if c.MaxRecordBytes < c.MaxFieldBytes || c.MaxRecordBytes > 1<<30 {
		return fielderr.New("max_record_bytes", "must be in [max_field_bytes=%d, %d], got %d", c.MaxFieldBytes, 1<<30, c.MaxRecordBytes)
	}
	switch c.Format {
	case "", FormatJSONL, FormatParquet, FormatQReCC, FormatTopiOCQA:
	default:
		return fielderr.New("format", "want jsonl, parquet, qrecc or topiocqa (or empty to detect), got %q", c.Format)
	}
	if err := checkColumns(c.Columns); err != nil {
		return fielderr.New("columns", "%v", strings.TrimPrefix(err.Error(), "data.columns: "))
	}
	if err := c.Prompt.Validate(); err != nil {
		return fielderr.Prefix("prompt", err)
	}
	if err := c.Prep.Validate(); err != nil {
		return fielderr.Prefix("prep", err)
	}
	return nil
}

// LoadOptions are the options every loader of this config's turns uses:
// the format, bad-record policy, user key, memory fields and column mapping.
func (c Config) LoadOptions() LoadOptions {
	return LoadOptions{Format: c.Format, SkipBad: c.SkipBad, UserField: c.UserField, Columns: c.Columns,
		MemoryField: c.MemoryField, MemoryLabelsField: c.MemoryLabelsField,
		MaxFieldBytes: c.MaxFieldBytes, MaxRecordBytes: c.MaxRecordBytes}
}

// validKeyName checks a user_field / split_by value.
func validKeyName(v string, allowUser bool) error {
	switch {
	case v == "" || v == "conv_id" || v == "topic":
		return nil
	case allowUser && v == "user":
		return nil
	case strings.HasPrefix(v, "meta.") && len(v) > len("meta."):
		return nil
	}
	if allowUser {
		return fmt.Errorf("want conv_id, user, topic or meta.<key>, got %q", v)
	}
	return fmt.Errorf("want conv_id, topic or meta.<key>, got %q", v)
}
