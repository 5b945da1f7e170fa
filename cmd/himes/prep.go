package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/datasets"
)

func newPrepCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "prep",
		Short: "Prepare SFT and RL data",
		Long: `Turns conversations (normalized JSONL or Parquet, QReCC or TopiOCQA JSON)
into training-ready files:

  himes prep sft      (prompt, completion = reference rewrite) pairs for SFT,
                      in TRL's prompt/completion and messages layouts
  himes prep rl       the GRPO prompt set: turns with a reference answer,
                      their gold passages and user key
  himes prep queries  each user's historical queries, for long-term memory

Inputs are --in FILE (repeatable) or, with --config, the run config's data
files. Settings come from the defaults, then the config's data section, then
the flags given explicitly. Outputs are written atomically, with a
summary.json of what was kept and dropped, and why.`,
	}
	cmd.AddCommand(newPrepSFTCmd(), newPrepRLCmd(), newPrepQueriesCmd())
	return cmd
}

// prepFlags are the flags the prep subcommands share.
type prepFlags struct {
	cf        configFlags
	in        []string
	out       string
	format    string
	skipBad   bool
	userField string
	seed      int64
	valFrac   float64
	splitBy   string
	// outputs lists the files written into the --out folder (nil: --out is
	// the one file written, as for prep queries).
	outputs func(dir string) []string
}

func (f *prepFlags) register(cmd *cobra.Command, outHelp string) {
	f.cf.register(cmd, false)
	fl := cmd.Flags()
	fl.StringArrayVar(&f.in, "in", nil, "input file (repeatable); default: the config's data files")
	fl.StringVarP(&f.out, "out", "o", "", outHelp)
	fl.StringVar(&f.format, "format", "", "input format: jsonl, parquet, qrecc or topiocqa; empty detects it (overrides data.format)")
	fl.BoolVar(&f.skipBad, "skip-bad", false, "skip invalid input records (counted) instead of failing (overrides data.skip_bad)")
	fl.StringVar(&f.userField, "user-field", "conv_id", "what identifies a user: conv_id, topic or meta.<key> (overrides data.user_field)")
	fl.Int64Var(&f.seed, "seed", 1, "seed of the split and of the example choice (overrides run.seed)")
	_ = cmd.MarkFlagRequired("out")
}

func (f *prepFlags) registerSplit(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.Float64Var(&f.valFrac, "val-fraction", datasets.DefaultPrepConfig().ValFraction, "fraction of split keys held out for validation (overrides data.prep.val_fraction)")
	fl.StringVar(&f.splitBy, "split-by", "conv_id", "key that never straddles the splits: conv_id, user, topic or meta.<key> (overrides data.prep.split_by)")
}

// resolve merges defaults, the config and the flags set explicitly, and
// picks the input files: --in, else the config's file for this command.
func (f *prepFlags) resolve(cmd *cobra.Command, fromConfig func(datasets.Config) []string) (datasets.Config, int64, []string, error) {
	run, err := f.cf.loadOrDefaults()
	if err != nil {
		return run.Data, 0, nil, err
	}
	dcfg, seed := run.Data, run.Run.Seed
	var inputs []string
	for _, in := range fromConfig(dcfg) {
		if in != "" {
			inputs = append(inputs, in)
		}
	}
	fl := cmd.Flags()
	if fl.Changed("format") {
		dcfg.Format = f.format
	}
	if fl.Changed("skip-bad") {
		dcfg.SkipBad = f.skipBad
	}
	if fl.Changed("user-field") {
		dcfg.UserField = f.userField
	}
	if fl.Changed("seed") {
		seed = f.seed
	}
	if fl.Lookup("val-fraction") != nil && fl.Changed("val-fraction") {
		dcfg.Prep.ValFraction = f.valFrac
	}
	if fl.Lookup("split-by") != nil && fl.Changed("split-by") {
		dcfg.Prep.SplitBy = f.splitBy
	}
	if len(f.in) > 0 {
		inputs = f.in
	}
	if len(inputs) == 0 {
		return dcfg, 0, nil, fmt.Errorf("no input: give --in FILE or a --config whose data section names the files")
	}
	if f.outputs == nil {
		err = refuseOutputOverInput("--out", f.out, inputs...)
	} else {
		err = refuseOutputsOverInput("--out", f.out, append(f.outputs(f.out), filepath.Join(f.out, "summary.json")), inputs...)
	}
	if err != nil {
		return dcfg, 0, nil, err
	}
	return dcfg, seed, inputs, nil
}

// load reads every input and reports invalid records that were skipped.
func (f *prepFlags) load(ctx context.Context, dcfg datasets.Config, inputs []string) ([]datasets.Turn, datasets.LoadStats, error) {
	turns, st, err := datasets.LoadFiles(ctx, inputs, dcfg.LoadOptions())
	if err != nil {
		return nil, st, err
	}
	for i, e := range st.SkippedErrors {
		if i == 5 {
			slog.Warn("more invalid records skipped", "count", st.Skipped-5)
			break
		}
		slog.Warn("skipped invalid record", "err", e)
	}
	slog.Info("loaded", "files", len(inputs), "turns", st.Records, "skipped", st.Skipped)
	return turns, st, nil
}

// prepSummary is written to summary.json beside the outputs.
type prepSummary struct {
	Command string              `json:"command"`
	Inputs  []string            `json:"inputs"`
	Seed    int64               `json:"seed"`
	Prep    datasets.PrepConfig `json:"prep"`
	Invalid int                 `json:"invalid_records_skipped"`
	Stats   datasets.PrepStats  `json:"stats"`
	Files   []string            `json:"files"`
}

func newPrepSFTCmd() *cobra.Command {
	var (
		f                        prepFlags
		ratio                    float64
		maxPrompt, maxCompletion int
	)
	cmd := &cobra.Command{
		Use:   "sft (--in FILE... | --config FILE) --out DIR",
		Short: "Write (prompt, rewrite) pairs for supervised fine-tuning",
		Long: `Renders each turn's prompt (data.prompt of the config: system message,
template, history window) and pairs it with the reference rewrite. Adds "no
rewrite needed" examples (completion = the question) so that they make up
--no-rewrite-ratio of the examples: turns whose rewrite equals the question
first, then turns whose self-contained rewrite stands in for the question.
De-duplicates pairs, drops empty and over-long ones, and splits train and
validation by conversation (--split-by). Writes, under DIR:

  prompt_completion/{train,validation}.{jsonl,parquet}   {"prompt", "completion"}
  messages/{train,validation}.{jsonl,parquet}            {"messages": [{"role", "content"}]}
  examples/{train,validation}.jsonl                      ids, kind and both forms
  summary.json                                           counts per reason

Both layouts load with datasets.load_dataset and TRL's SFTTrainer. With
--config the input is data.sft, else data.train.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dcfg, seed, inputs, err := f.resolve(cmd, func(d datasets.Config) []string {
				if d.SFT != "" {
					return []string{d.SFT}
				}
				return []string{d.Train}
			})
			if err != nil {
				return err
			}
			fl := cmd.Flags()
			if fl.Changed("no-rewrite-ratio") {
				dcfg.Prep.NoRewriteRatio = ratio
			}
			if fl.Changed("max-prompt-chars") {
				dcfg.Prep.MaxPromptChars = maxPrompt
			}
			if fl.Changed("max-completion-chars") {
				dcfg.Prep.MaxCompletionChars = maxCompletion
			}
			if err := dcfg.Prep.Validate(); err != nil {
				return fmt.Errorf("prep settings: %w", err)
			}
			r, err := datasets.NewRenderer(dcfg.Prompt)
			if err != nil {
				return fmt.Errorf("data.prompt: %w", err)
			}
			ctx := cmd.Context()
			turns, lst, err := f.load(ctx, dcfg, inputs)
			if err != nil {
				return err
			}
			train, val, st, err := datasets.BuildSFT(ctx, turns, r, dcfg.Prep, seed)
			if err != nil {
				return err
			}
			if err := checkPrepKept("prep sft", st); err != nil {
				return err
			}
			if st.NoRewriteShortfall > 0 {
				slog.Warn("too few candidates for the no-rewrite ratio", "ratio", dcfg.Prep.NoRewriteRatio, "missing_examples", st.NoRewriteShortfall)
			}
			files, err := datasets.WriteSFT(ctx, f.out, train, val)
			if err != nil {
				return err
			}
			sum := prepSummary{Command: "prep sft", Inputs: inputs, Seed: seed, Prep: dcfg.Prep, Invalid: lst.Skipped, Stats: st, Files: files}
			return finishPrep(cmd.OutOrStdout(), f.out, sum)
		},
	}
	f.outputs = datasets.SFTOutputs
	f.register(cmd, "output directory")
	f.registerSplit(cmd)
	d := datasets.DefaultPrepConfig()
	cmd.Flags().Float64Var(&ratio, "no-rewrite-ratio", d.NoRewriteRatio, "share of \"no rewrite needed\" examples, completion = question (overrides data.prep.no_rewrite_ratio)")
	cmd.Flags().IntVar(&maxPrompt, "max-prompt-chars", d.MaxPromptChars, "drop pairs whose flat prompt is longer, 0 = no limit (overrides data.prep.max_prompt_chars)")
	cmd.Flags().IntVar(&maxCompletion, "max-completion-chars", d.MaxCompletionChars, "drop pairs whose completion is longer, 0 = no limit (overrides data.prep.max_completion_chars)")
	return cmd
}

func newPrepRLCmd() *cobra.Command {
	var (
		f           prepFlags
		requirePass bool
	)
	cmd := &cobra.Command{
		Use:   "rl (--in FILE... | --config FILE) --out DIR",
		Short: "Write the GRPO prompt set (turns with a reference answer)",
		Long: `Keeps the turns that have a question and a reference answer (and gold
passages, with --require-passages), drops repeats of an identical (history,
question, answer), fills the user key (--user-field), and splits train and
validation by --split-by. Writes DIR/{train,validation}.{jsonl,parquet} in
the normalized schema (passages keep their ids and relevance, the gold
judgments of the retrieval metrics) and DIR/summary.json. With --config the
input is data.train.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dcfg, seed, inputs, err := f.resolve(cmd, func(d datasets.Config) []string { return []string{d.Train} })
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("require-passages") {
				dcfg.Prep.RequirePassages = requirePass
			}
			if err := dcfg.Prep.Validate(); err != nil {
				return fmt.Errorf("prep settings: %w", err)
			}
			ctx := cmd.Context()
			turns, lst, err := f.load(ctx, dcfg, inputs)
			if err != nil {
				return err
			}
			train, val, st, err := datasets.BuildRL(turns, dcfg.Prep, seed)
			if err != nil {
				return err
			}
			if err := checkPrepKept("prep rl", st); err != nil {
				return err
			}
			files, err := datasets.WriteRL(ctx, f.out, train, val)
			if err != nil {
				return err
			}
			sum := prepSummary{Command: "prep rl", Inputs: inputs, Seed: seed, Prep: dcfg.Prep, Invalid: lst.Skipped, Stats: st, Files: files}
			return finishPrep(cmd.OutOrStdout(), f.out, sum)
		},
	}
	f.outputs = datasets.RLOutputs
	f.register(cmd, "output directory")
	f.registerSplit(cmd)
	cmd.Flags().BoolVar(&requirePass, "require-passages", false, "keep only turns with gold passages (overrides data.prep.require_passages)")
	return cmd
}

func newPrepQueriesCmd() *cobra.Command {
	var f prepFlags
	cmd := &cobra.Command{
		Use:   "queries (--in FILE... | --config FILE) --out FILE",
		Short: "Write each user's historical queries (long-term-memory input)",
		Long: `Writes one JSON line per query, {"user", "query", "time", "conv_id",
"turn"}, users in order of first appearance and each user's queries in time
order. --user-field says what a user is (conv_id, topic or meta.<key>).
With --config the input is data.train.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			dcfg, _, inputs, err := f.resolve(cmd, func(d datasets.Config) []string { return []string{d.Train} })
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			turns, _, err := f.load(ctx, dcfg, inputs)
			if err != nil {
				return err
			}
			qs := datasets.HistoricalQueries(turns)
			if len(qs) == 0 {
				return fmt.Errorf("prep queries: no user query in %d input turns; nothing written", len(turns))
			}
			if err := datasets.WriteJSONLValues(ctx, f.out, qs); err != nil {
				return err
			}
			users := map[string]bool{}
			for _, q := range qs {
				users[q.User] = true
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d queries of %d users to %s\n", len(qs), len(users), f.out)
			return nil
		},
	}
	f.register(cmd, "output JSONL file")
	return cmd
}

// checkPrepKept fails a prep that kept no example (it used to write empty
// files and exit 0), before anything is written, saying why each was dropped.
func checkPrepKept(command string, st datasets.PrepStats) error {
	if st.Train+st.Validation > 0 {
		return nil
	}
	var reasons []string
	for _, k := range sortedKeys(st.Dropped) {
		reasons = append(reasons, fmt.Sprintf("%s %d", k, st.Dropped[k]))
	}
	why := "nothing was dropped"
	if len(reasons) > 0 {
		why = "dropped: " + strings.Join(reasons, ", ")
	}
	return fmt.Errorf("%s: no examples from %d input turns (%s); nothing written", command, st.Input, why)
}

// finishPrep writes summary.json and prints the counts per reason.
func finishPrep(w io.Writer, dir string, s prepSummary) error {
	path := filepath.Join(dir, "summary.json")
	if err := datasets.WriteSummary(path, s); err != nil {
		return err
	}
	fmt.Fprintf(w, "%s: %d input turns from %d file(s)\n", s.Command, s.Stats.Input, len(s.Inputs))
	row := func(name string, n int, note string) { fmt.Fprintf(w, "  %-30s %7d%s\n", name, n, note) }
	if s.Invalid > 0 {
		row("invalid records skipped", s.Invalid, "")
	}
	row("train", s.Stats.Train, fmt.Sprintf("  (%d split keys)", s.Stats.TrainKeys))
	row("validation", s.Stats.Validation, fmt.Sprintf("  (%d split keys)", s.Stats.ValKeys))
	if len(s.Stats.Kinds) > 0 {
		fmt.Fprintln(w, "kept, by kind")
		for _, k := range sortedKeys(s.Stats.Kinds) {
			row(k, s.Stats.Kinds[k], "")
		}
	}
	fmt.Fprintln(w, "dropped, by reason")
	if len(s.Stats.Dropped) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, k := range sortedKeys(s.Stats.Dropped) {
		row(k, s.Stats.Dropped[k], "")
	}
	_, err := fmt.Fprintf(w, "wrote %d files and %s\n", len(s.Files), path)
	return err
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
