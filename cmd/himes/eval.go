package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/progress"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/trainer"
)

type evalFlags struct {
	cf          configFlags
	rewriters   []string
	memory      []string
	runDir      string
	checkpoint  string
	data        []string
	out         string
	concurrency int
	resamples   int
	level       float64
	limit       int
	ollamaHost  string
	// policyCheckpoint labels the policy rewriter's checkpoint (grpo.ResolveRunCheckpoint).
	policyCheckpoint string
}

func newEvalCmd() *cobra.Command {
	var prof profileFlags
	f := &evalFlags{}
	cmd := &cobra.Command{
		Use:   "eval --config X --rewriter raw,concat,gold,policy,ollama:<model> [--memory off,on]",
		Short: "Evaluate rewriters through the full HiMeS pipeline",
		Long: `eval runs every rewriter (× long-term memory off/on) through the whole
inference pipeline — rewrite → retrieve → long-term-memory re-rank → respond →
score — over an evaluation set, and reports per system the HSER reward and its
terms, SQuAD F1, and where passages are judged MRR, NDCG@3, Recall@10 and
Recall@100 (trec_eval's definitions). Means carry 95% bootstrap intervals that
resample conversations, and each system is compared with the raw question by
a paired randomization test over conversations.

Rewriters: raw (the question), concat (user history + question), gold (the
human rewrite), policy (the trainer endpoint's policy, greedy; with --run, the
run's checkpoint that --checkpoint names: latest, or best = the one
grpo.best_metric kept; by default the run's final policy, which is the best
under grpo.load_best_at_end; the tables name the checkpoint, its step and
metric value), ollama:<model> (a chat model served by Ollama).

Writes into --out: summary.md (also printed), summary.json (every number,
and the retrieval: method, depths, the fingerprinted embedders of the dense
first stage and of the memory), turns.parquet (one row per system and turn),
runs/<system>.trec and qrels.txt (check with: trec_eval -m recall.10
qrels.txt runs/raw.trec), and what produced them: config.yaml (the resolved
config, every --set applied) and version.json (the binary's).
The folder is replaced whole (written beside it, then swapped in), so no
file of an earlier evaluation is left in it; an existing folder that is not
a himes eval folder (no .himes-eval marker) is refused. While it runs the
evaluation holds a lock on the folder (the file <out>.lock beside it): a
second himes eval into the same --out fails at once, naming the first's pid.

With --run or --checkpoint and no --rewriter, the rows are raw, concat, gold
and policy; a --rewriter list without policy and a --checkpoint is an error.
policy without --run or --checkpoint is the trainer endpoint's policy as it
is; when it has had no update (policy_version 0) it is labelled
"policy (untrained)" in every output (table, summary.json, turns.parquet;
runs/policy_untrained.trec) and a warning is logged.
Failed turns are counted per stage and left out of means and pairs; when a
system fails more than rollout.max_failed_fraction of its turns the command
writes its outputs and exits with an error.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Evaluating a run (or a checkpoint) means evaluating its
			// policy: the default rows gain it unless --rewriter was given.
			if !cmd.Flags().Changed("rewriter") && (f.runDir != "" || f.checkpoint != "") {
				f.rewriters = append(slices.Clone(f.rewriters), "policy")
			}
			stop, err := prof.start()
			if err != nil {
				return err
			}
			return stop(runEval(cmd.Context(), cmd, f))
		},
	}
	f.cf.register(cmd, false)
	prof.register(cmd)
	fl := cmd.Flags()
	fl.StringSliceVar(&f.rewriters, "rewriter", []string{"raw", "concat", "gold"}, "rewriters to compare: raw, concat, gold, policy, ollama:<model>; with --run or --checkpoint the default adds policy")
	fl.StringSliceVar(&f.memory, "memory", []string{"config"}, "long-term memory: off, on, on:<variant> (paper, semantic, +topic, no-recency, …: an ablation row each), several comma-separated; config = as retrieval.memory.enabled says")
	fl.StringVar(&f.runDir, "run", "", "a training run directory: its config.yaml when --config is absent, its checkpoint (--checkpoint) for the policy rewriter")
	fl.StringVar(&f.checkpoint, "checkpoint", "", "policy checkpoint to load before evaluating: latest or best (the run's, with --run; without --run latest is the trainer's newest), or a trainer checkpoint name (default with --run: the run's final policy, best when grpo.load_best_at_end made it so)")
	fl.StringSliceVar(&f.data, "data", nil, "evaluate on these dataset files (comma-separated or repeated) instead of the config's held-out split")
	fl.StringVarP(&f.out, "out", "o", "", "output directory (default: <run dir>/eval, or <run.output_dir>/<run.name>-eval)")
	fl.IntVar(&f.concurrency, "concurrency", 0, "conversations evaluated at once (default: rollout.concurrency)")
	fl.IntVar(&f.resamples, "resamples", 2000, "bootstrap resamples and randomization-test sign flips (at least 2/(1−level): 40 at 95%)")
	fl.Float64Var(&f.level, "level", 0.95, "confidence level of the intervals")
	fl.IntVar(&f.limit, "limit", 0, "evaluate only the first N conversations (0 = all)")
	fl.StringVar(&f.ollamaHost, "ollama-host", "", "Ollama host for ollama:<model> rewriters (default: rollout.ollama.hosts[0], then OLLAMA_HOST)")
	return cmd
}

func (f *evalFlags) config() (configs.Config, error) {
	if f.cf.path == "" && f.runDir != "" {
		return savedRunConfig(f.runDir, f.cf.sets)
	}
	if f.cf.path == "" {
		return configs.Config{}, errors.New("--config is required (or --run with a run directory holding config.yaml)")
	}
	return f.cf.load()
}

// savedRunConfig reads the config a run saved, applies --set overrides and
// validates it. The saved paths are already resolved (against the directory
// training ran from), so they are used as they are, not re-resolved against
// the run directory as configs.Load would.
func savedRunConfig(runDir string, sets []string) (configs.Config, error) {
	cfg, err := configs.LoadRunSnapshot(runDir)
	if err != nil {
		return cfg, err
	}
	for _, s := range sets {
		if err := cfg.Override(s); err != nil {
			return cfg, err
		}
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("%s: %w", filepath.Join(runDir, "config.yaml"), err)
	}
	return cfg, nil
}

// memoryMode is one long-term-memory setting to evaluate: off, on as the
// config says, or on with a named variant (memory.Config.Variant).
type memoryMode struct {
	on      bool
	variant string
}

func (m memoryMode) suffix() string {
	switch {
	case !m.on:
		return ""
	case m.variant == "":
		return "+memory"
	}
	return "+memory:" + m.variant
}

// memoryModes resolves --memory into the settings to evaluate, off first,
// then on, then the variants in the order given.
func (f *evalFlags) memoryModes(cfg configs.Config) ([]memoryMode, error) {
	var modes []memoryMode
	for _, m := range f.memory {
		var mode memoryMode
		switch m = strings.TrimSpace(m); {
		case m == "off":
		case m == "on":
			mode.on = true
		case m == "config":
			mode.on = cfg.Retrieval.Memory.Enabled
		case strings.HasPrefix(m, "on:"):
			mode = memoryMode{on: true, variant: strings.TrimPrefix(m, "on:")}
			if _, err := cfg.Retrieval.Memory.Variant(mode.variant); err != nil {
				return nil, fmt.Errorf("--memory %q: %w", m, err)
			}
		default:
			return nil, fmt.Errorf("--memory %q: want off, on, on:<variant> or config", m)
		}
		if !slices.Contains(modes, mode) {
			modes = append(modes, mode)
		}
	}
	slices.SortStableFunc(modes, func(a, b memoryMode) int {
		rank := func(m memoryMode) int {
			switch {
			case !m.on:
				return 0
			case m.variant == "":
				return 1
			}
			return 2
		}
		return rank(a) - rank(b)
	})
	return modes, nil
}

func runEval(ctx context.Context, cmd *cobra.Command, f *evalFlags) (err error) {
	cfg, err := f.config()
	if err != nil {
		return err
	}
	modes, err := f.memoryModes(cfg)
	if err != nil {
		return err
	}
	stats := stats.Config{Resamples: f.resamples, Level: f.level, Seed: uint64(cfg.Run.Seed)}
	if err := stats.Validate(); err != nil {
		return fmt.Errorf("--resamples/--level: %w", err)
	}
	if f.limit < 0 || f.concurrency < 0 {
		return fmt.Errorf("--limit and --concurrency must be ≥ 0 (0: all conversations, rollout.concurrency), got %d and %d", f.limit, f.concurrency)
	}
	// Everything that can be checked without the data and the index is
	// checked first: a typo must not cost the minutes a large index takes.
	if err := f.checkRewriters(ctx, cfg); err != nil {
		return err
	}
	extra, err := f.loadData(ctx, cfg)
	if err != nil {
		return err
	}
	out := f.outDir(cfg)
	if err := evaluate.CheckOutputDir(out); err != nil {
		return err
	}
	// The folder is replaced whole: an input inside it would be deleted.
	if err := refuseInputInOutputDir("--out", out, append(slices.Clone(f.data), cfg.Data.KB)...); err != nil {
		return err
	}
	// Two evaluations into one folder would each replace it whole, and one's
	// systems would be lost: the second fails now, naming the first.
	lock, err := rundir.LockOutput("eval output", out)
	if err != nil {
		return err
	}
	defer lock.Close()
	// trainer.endpoint "launch": the run's trainer, started on its
	// checkpoints (the run's trainer/), its log appended to the run's.
	if cfg.Trainer.Endpoint == trainer.LaunchEndpoint && f.runDir == "" {
		return fmt.Errorf("trainer.endpoint %q: himes eval starts the trainer only for a run (--run RUN, whose checkpoints it loads); or pass --set trainer.endpoint=URL", trainer.LaunchEndpoint)
	}
	lt, err := startLaunchedTrainer(ctx, cfg, f.runDir, filepath.Join(f.runDir, trainerLogName))
	if err != nil {
		return err
	}
	defer func() { err = lt.finish(err) }()
	ctx = lt.watch(ctx)
	cfg = lt.config(cfg)
	// retrieval.ollama_url "launch": the embedder's Ollama server, its log
	// in the run directory, or beside the output (which is replaced whole).
	ollamaLog := filepath.Clean(out) + "." + ollamaLogName
	if f.runDir != "" {
		ollamaLog = filepath.Join(f.runDir, ollamaLogName)
	}
	recorded := cfg // as resolved, before a launched server's URL replaces "launch"
	lo, err := startLaunchedOllama(ctx, cfg.Retrieval, ollamaLog)
	if err != nil {
		return err
	}
	defer func() { err = lo.finish(err) }()
	ctx = lo.watch(ctx)
	cfg = lo.config(cfg)

	// One set of components per memory mode: the memory is part of the
	// retrieval pipeline. The policy and the data come from the first.
	comps := map[memoryMode]*components{}
	cfgs := map[memoryMode]configs.Config{}
	var opts buildOptions
	if f.runDir != "" {
		opts.trainerDir = filepath.Join(f.runDir, "trainer")
	}
	for _, mode := range modes {
		c := cfg
		c.Retrieval.Memory.Enabled = mode.on
		if mode.variant != "" {
			if c.Retrieval.Memory, err = c.Retrieval.Memory.Variant(mode.variant); err != nil {
				return err
			}
		}
		comp, err := buildComponents(ctx, c, opts)
		if err != nil {
			return fmt.Errorf("memory %s: %w", memoryLabel(mode), err)
		}
		comps[mode], cfgs[mode] = comp, c
	}
	first := comps[modes[0]]

	turns := first.Eval
	if len(f.data) > 0 {
		turns = extra
	}
	turns = evaluate.LimitConversations(turns, f.limit)
	if len(turns) == 0 {
		return errors.New("no evaluation turns (set data.eval or data.eval_fraction, or pass --data)")
	}
	if len(f.data) > 0 {
		// the evaluated users' memory: what the training data and these
		// turns carry, seen causally
		for _, mode := range modes {
			c := comps[mode]
			if err := c.attachMemory(ctx, cfgs[mode], dedupTurns(c.known, turns)); err != nil {
				return fmt.Errorf("memory %s: %w", memoryLabel(mode), err)
			}
		}
	}

	// Prompts use the run's memory settings under every --memory variant,
	// the ones the policy was trained with.
	renderer, err := first.newRenderer(cfg)
	if err != nil {
		return err
	}
	render := func(ctx context.Context, t datasets.Turn) (trainer.Prompt, error) {
		p, err := renderer.RenderContext(ctx, t)
		if err != nil {
			return trainer.Prompt{}, err
		}
		return trainer.PromptFromRendered(t.ID(), p), nil
	}
	var rewriters []evaluate.Rewriter
	for _, name := range f.rewriters {
		rw, err := f.rewriter(ctx, strings.TrimSpace(name), cfg, first.Policy, render)
		if err != nil {
			return err
		}
		rewriters = append(rewriters, rw)
	}
	var systems []evaluate.System
	for _, mode := range modes {
		for _, rw := range rewriters {
			sys := evaluate.System{Name: rw.Name() + mode.suffix(), Rewriter: rw, Memory: mode.on,
				Variant: mode.variant, Retriever: comps[mode].Retrieve}
			if _, ok := rw.(evaluate.Policy); ok {
				sys.Checkpoint = f.policyCheckpoint
			}
			systems = append(systems, sys)
		}
	}

	conc := f.concurrency
	if conc <= 0 {
		conc = cfg.Rollout.Concurrency
	}
	slog.Info("evaluating", "turns", len(turns), "systems", len(systems), "concurrency", conc, "responder", first.Responder.Name())
	// Every system answers every turn: the count is of (system, turn)
	// pairs, and its unit says so.
	prog := progress.New(progressOutput(cmd), progress.Options{Label: "eval", Unit: "system-turn", Total: len(turns) * len(systems)})
	what := fmt.Sprintf("%d systems × %d turns", len(systems), len(turns))
	rep, results, err := evaluate.Evaluate(ctx, turns, systems, first.Responder, first.Scorer,
		evaluate.Options{Concurrency: conc, Stats: stats, Baseline: "raw",
			Progress: func(done, _ int) { prog.Update(done, what, "systems", len(systems), "turns", len(turns)) }})
	prog.Finish()
	if err != nil {
		return err
	}
	if !slices.ContainsFunc(systems, func(s evaluate.System) bool { return s.Rewriter.Name() == "raw" }) {
		slog.Warn("no raw system: nothing to compare against; add raw to --rewriter for paired tests")
	}

	rep.Retrieval = retrievalInfo(cfg, modes, comps)
	if len(f.data) > 0 {
		rep.TrainingConversations = len(datasets.SharedConversations(slices.Concat(first.SFT, first.Train, first.Dev), turns))
	}
	provenance, err := evalProvenance(recorded)
	if err != nil {
		return err
	}
	if err := evaluate.WriteOutputDir(out, rep, results, turns, provenance...); err != nil {
		return err
	}
	if err := evaluate.WriteMarkdown(cmd.OutOrStdout(), rep); err != nil {
		return err
	}
	slog.Info("evaluation written", "dir", out, "elapsed_s", math.Round(rep.Seconds*10)/10)
	return evaluate.CheckFailedTurns(rep, cfg.Rollout.MaxFailedFraction, filepath.Join(out, "turns.parquet"))
}

// retrievalInfo identifies the evaluation's retrieval: the method and
// depths, and the embedders of the dense first stage and of the memory (the
// first memory-on mode's; the variants share its embedder).
func retrievalInfo(cfg configs.Config, modes []memoryMode, comps map[memoryMode]*components) evaluate.RetrievalInfo {
	rc := cfg.Retrieval
	info := evaluate.RetrievalInfo{Method: rc.Method, TopK: rc.TopK, Candidates: rc.Candidates}
	for _, m := range modes {
		dense, mem := comps[m].Retriever.EmbedderNames()
		info.Embedder = cmp.Or(info.Embedder, dense)
		info.MemoryEmbedder = cmp.Or(info.MemoryEmbedder, mem)
	}
	return info
}

// evalProvenance are the files that say what produced an evaluation, as a
// training run keeps them (provenance): config.yaml, every --set applied,
// and version.json.
func evalProvenance(cfg configs.Config) ([]evaluate.OutputFile, error) {
	conf, version, err := provenance(cfg)
	if err != nil {
		return nil, err
	}
	return []evaluate.OutputFile{{Name: "config.yaml", Data: conf}, {Name: "version.json", Data: version}}, nil
}

func memoryLabel(m memoryMode) string {
	switch {
	case !m.on:
		return "off"
	case m.variant == "":
		return "on"
	}
	return "on:" + m.variant
}

// outDir is --out, or the default: <run dir>/eval with --run, else
// <run.output_dir>/<run.name>-eval.
func (f *evalFlags) outDir(cfg configs.Config) string {
	switch {
	case f.out != "":
		return f.out
	case f.runDir != "":
		return filepath.Join(f.runDir, "eval")
	}
	return filepath.Join(cfg.Run.OutputDir, cfg.Run.Name+"-eval")
}

// loadData reads the --data files (nil without them), before the
// components: a malformed file is reported before the index is loaded.
func (f *evalFlags) loadData(ctx context.Context, cfg configs.Config) ([]datasets.Turn, error) {
	if len(f.data) == 0 {
		return nil, nil
	}
	// LoadFiles refuses a file given twice and a conversation in two files:
	// either would be evaluated twice, doubling its turns in every mean.
	load := cfg.Data.LoadOptions()
	load.RequireQuestion = true // evaluated turns are rendered from their question
	turns, _, err := datasets.LoadFiles(ctx, f.data, load)
	if err != nil {
		return nil, fmt.Errorf("--data: %w", err)
	}
	return turns, nil
}

// checkRewriters validates --rewriter before anything is loaded: every name
// known, none twice (their outputs would share a file), every ollama:<model>
// naming a model its host serves.
func (f *evalFlags) checkRewriters(ctx context.Context, cfg configs.Config) error {
	if len(f.rewriters) == 0 {
		return errors.New("--rewriter: name at least one rewriter")
	}
	seen := map[string]bool{}
	for _, name := range f.rewriters {
		name = strings.TrimSpace(name)
		switch {
		case name == "raw" || name == "concat" || name == "gold" || name == "policy":
		case strings.HasPrefix(name, "ollama:"):
			o, err := evaluate.NewOllama(strings.TrimPrefix(name, "ollama:"), f.ollamaHostFor(cfg), nil, cfg.Rollout.Ollama.Call.Policy())
			if err != nil {
				return fmt.Errorf("--rewriter %q: %w", name, err)
			}
			err = o.Check(ctx)
			o.Close()
			if err != nil {
				return fmt.Errorf("--rewriter %q: %w", name, err)
			}
		default:
			return unknownRewriter(name)
		}
		if seen[name] {
			return fmt.Errorf("--rewriter %q: named twice", name)
		}
		seen[name] = true
	}
	// --checkpoint names the policy rewriter's checkpoint; without that
	// rewriter it would be ignored, and the table would not say so.
	if f.checkpoint != "" && !seen["policy"] {
		list := strings.Join(f.rewriters, ",")
		return fmt.Errorf("--checkpoint %q: names the policy's checkpoint, but --rewriter %s has no policy (add it: --rewriter %s,policy)", f.checkpoint, list, list)
	}
	return nil
}

func unknownRewriter(name string) error {
	return fmt.Errorf("--rewriter %q: want raw, concat, gold, policy or ollama:<model>", name)
}

// ollamaHostFor is the host of ollama:<model> rewriters.
func (f *evalFlags) ollamaHostFor(cfg configs.Config) string {
	if f.ollamaHost == "" && len(cfg.Rollout.Ollama.Hosts) > 0 {
		return cfg.Rollout.Ollama.Hosts[0]
	}
	return f.ollamaHost
}

// rewriter builds one named rewriter.
func (f *evalFlags) rewriter(ctx context.Context, name string, cfg configs.Config, pol trainer.Policy, render evaluate.PromptFunc) (evaluate.Rewriter, error) {
	switch {
	case name == "raw":
		return evaluate.Raw{}, nil
	case name == "concat":
		return evaluate.Concat{}, nil
	case name == "gold":
		return evaluate.Gold{}, nil
	case name == "policy":
		rw := evaluate.Policy{Policy: pol, Render: render, MaxTokens: cfg.GRPO.MaxTokens, Seed: cfg.Run.Seed}
		if f.runDir != "" || f.checkpoint != "" {
			c, err := grpo.ResolveRunCheckpoint(f.runDir, f.checkpoint)
			if err != nil {
				return nil, err
			}
			if err := grpo.LoadPolicyCheckpoint(ctx, pol, c.Name, c.Version); err != nil {
				return nil, err
			}
			f.policyCheckpoint = c.Label
			return rw, nil
		}
		// Neither --run nor --checkpoint: the endpoint's policy as it is,
		// which is untrained when it has had no update; its rows must not
		// pass for a trained policy's.
		info, err := pol.Info(ctx)
		if err != nil {
			return nil, fmt.Errorf("--rewriter policy: %w", err)
		}
		if info.PolicyVersion == 0 {
			rw.Label = evaluate.UntrainedPolicy
			slog.Warn("--rewriter policy without --run or --checkpoint: the trainer endpoint's policy has had no update (policy_version 0); it is evaluated as "+
				evaluate.UntrainedPolicy+", not a trained policy (pass --run RUN to evaluate a run's checkpoint)", "endpoint", cfg.Trainer.Endpoint)
		}
		return rw, nil
	case strings.HasPrefix(name, "ollama:"):
		o, err := evaluate.NewOllama(strings.TrimPrefix(name, "ollama:"), f.ollamaHostFor(cfg), render, cfg.Rollout.Ollama.Call.Policy())
		if err != nil {
			return nil, err
		}
		o.MaxTokens = cfg.GRPO.MaxTokens // the policy's rewrites have the same cap
		return o, nil
	}
	return nil, unknownRewriter(name)
}
