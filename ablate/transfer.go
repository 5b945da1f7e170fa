package ablate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/report"
)

// Leave-one-collection-out transfer: does a rewriter trained on some
// collections help on one it never saw? For each collection, train on the
// others (same config, same seed) and evaluate on it against the raw
// question, the concatenated history and the human rewrite.

// TransferVariant is one training recipe run in every fold.
type TransferVariant struct {
	// Name labels the policy's rows ("sft", "grpo").
	Name string `json:"name"`
	// Overrides are --set overrides on top of the fold's data keys.
	Overrides []string `json:"overrides,omitempty"`
	// Base and Seed are set for a recipe repeated over seeds (see
	// SeededVariants): Base is the recipe's name, Seed its run.seed.
	Base string `json:"base,omitempty"`
	Seed int    `json:"seed,omitempty"`
}

// SeededVariants repeats every variant once per seed ("sft seed 2", with
// run.seed=2), so a fold's table shows how much of a difference between
// recipes is the seed's. No seeds returns the variants unchanged.
func SeededVariants(vs []TransferVariant, seeds []int) ([]TransferVariant, error) {
	if len(seeds) == 0 {
		return vs, nil
	}
	seen := map[int]bool{}
	for _, s := range seeds {
		if seen[s] {
			return nil, fmt.Errorf("transfer: seed %d is given twice", s)
		}
		seen[s] = true
	}
	var out []TransferVariant
	for _, v := range vs {
		for _, s := range seeds {
			out = append(out, TransferVariant{
				Name:      fmt.Sprintf("%s seed %d", v.Name, s),
				Overrides: append(append([]string(nil), v.Overrides...), fmt.Sprintf("%s=%d", SeedKey, s)),
				Base:      v.Name, Seed: s,
			})
		}
	}
	return out, nil
}

// TransferVariants are the recipes a config supports: SFT alone (the
// QuReTeC-style baseline, GRPO steps 0) when the config has an SFT phase,
// and the config as it is (SFT+GRPO, or GRPO alone).
func TransferVariants(cfg configs.Config) []TransferVariant {
	var vs []TransferVariant
	if cfg.GRPO.SFT.Epochs > 0 {
		vs = append(vs, TransferVariant{Name: "sft", Overrides: []string{"grpo.steps=0"}})
		if cfg.GRPO.Steps == 0 { // SFT alone was asked for: "sft+grpo" would be the same run
			return vs
		}
		return append(vs, TransferVariant{Name: "sft+grpo"})
	}
	return append(vs, TransferVariant{Name: "grpo"})
}

// TransferRun is one training run: a variant in a fold.
type TransferRun struct {
	Variant TransferVariant `json:"variant"`
	RunName string          `json:"run_name"`
	RunDir  string          `json:"run_dir"`
	EvalDir string          `json:"eval_dir"`
}

// TransferFold is one left-out collection and the runs trained without it.
type TransferFold struct {
	// Name is the left-out collection's file name without extension.
	Name    string        `json:"name"`
	HeldOut string        `json:"held_out"`
	Train   []string      `json:"train"`
	TrainAt string        `json:"train_file"` // the other collections, concatenated
	Runs    []TransferRun `json:"runs"`
}

// PlanTransfer lays out the folds under dir: one per collection, each with
// its training file and one run per variant. It checks names are distinct
// and each run's config validates before anything starts.
func PlanTransfer(base configs.Config, collections []string, variants []TransferVariant, dir string) ([]TransferFold, error) {
	if len(collections) < 2 {
		return nil, fmt.Errorf("transfer: need at least 2 collections, got %d", len(collections))
	}
	if len(variants) == 0 {
		return nil, errors.New("transfer: no variants")
	}
	absDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	dir = absDir
	abs := make([]string, len(collections))
	for i, c := range collections {
		if abs[i], err = filepath.Abs(c); err != nil {
			return nil, fmt.Errorf("transfer: %w", err)
		}
	}
	collections = abs
	seen := map[string]string{}
	for _, c := range collections {
		name := evaluate.FileSafe(collectionName(c))
		if prev, dup := seen[name]; dup {
			return nil, fmt.Errorf("transfer: collections %s and %s share the name %q", prev, c, name)
		}
		seen[name] = c
	}
	var folds []TransferFold
	for i, c := range collections {
		name := evaluate.FileSafe(collectionName(c))
		f := TransferFold{Name: name, HeldOut: c}
		for j, o := range collections {
			if j != i {
				f.Train = append(f.Train, o)
			}
		}
		foldDir := filepath.Join(dir, name)
		f.TrainAt = filepath.Join(foldDir, "train.jsonl")
		for _, v := range variants {
			runName := evaluate.FileSafe(strings.ReplaceAll(v.Name, "+", "_"))
			r := TransferRun{Variant: v, RunName: runName, RunDir: filepath.Join(foldDir, runName)}
			r.EvalDir = filepath.Join(r.RunDir, "eval")
			// The fold's training file is written later; validate against one
			// of its parts, which exists.
			cfg := base
			for _, o := range append(r.overrides(f), "data.train="+f.Train[0]) {
				if err := cfg.Override(o); err != nil {
					return nil, fmt.Errorf("transfer: fold %s, %s: %w", name, v.Name, err)
				}
			}
			if err := cfg.Validate(); err != nil {
				return nil, fmt.Errorf("transfer: fold %s, %s: %w", name, v.Name, err)
			}
			f.Runs = append(f.Runs, r)
		}
		folds = append(folds, f)
	}
	return folds, nil
}

// SelectFolds keeps the folds whose left-out collection is named in names
// (all when names is empty); a name that matches no fold is an error.
func SelectFolds(folds []TransferFold, names []string) ([]TransferFold, error) {
	if len(names) == 0 {
		return folds, nil
	}
	var out []TransferFold
	for _, n := range names {
		i := slices.IndexFunc(folds, func(f TransferFold) bool { return f.Name == n })
		if i < 0 {
			var have []string
			for _, f := range folds {
				have = append(have, f.Name)
			}
			return nil, fmt.Errorf("transfer: --folds %s: no such left-out collection (have %s)", n, strings.Join(have, ", "))
		}
		out = append(out, folds[i])
	}
	return out, nil
}

// overrides are the --set overrides of r in fold f: its data, its run
// directory, then the variant's own.
func (r TransferRun) overrides(f TransferFold) []string {
	o := []string{
		"data.train=" + f.TrainAt,
		"data.eval=" + f.HeldOut,
		"run.name=" + r.RunName,
		"run.output_dir=" + filepath.Dir(r.RunDir),
		// The dev split (data.dev_fraction) takes its share of every training
		// collection (WriteFoldTrain marks each turn's), not of their union.
		"data.dev_group=meta." + CollectionKey,
	}
	return append(o, r.Variant.Overrides...)
}

// Overrides are the --set overrides that make the base config train run r
// of fold f.
func (f TransferFold) Overrides(r TransferRun) []string { return r.overrides(f) }

func collectionName(path string) string {
	base := filepath.Base(path)
	for _, ext := range []string{".gz", ".jsonl", ".ndjson", ".parquet", ".pq", ".json"} {
		base = strings.TrimSuffix(base, ext)
	}
	return base
}

// CollectionKey is the meta key WriteFoldTrain marks each turn's collection
// with (its file name without extensions).
const CollectionKey = "transfer_collection"

// WriteFoldTrain concatenates the fold's training collections into one
// normalized JSONL, each turn's meta.transfer_collection naming its collection (the
// dev split is stratified by it). Conversation ids must not repeat across
// collections: they key long-term memory, splits and the bootstrap's
// clusters.
func WriteFoldTrain(ctx context.Context, f TransferFold, opts datasets.LoadOptions) (int, error) {
	var all []datasets.Turn
	owner := map[string]string{}
	for _, path := range f.Train {
		turns, _, err := datasets.LoadContext(ctx, path, opts)
		if err != nil {
			return 0, fmt.Errorf("transfer: fold %s: %w", f.Name, err)
		}
		for _, t := range turns {
			if o, ok := owner[t.ConvID]; ok && o != path {
				return 0, fmt.Errorf("transfer: conversation %q is in both %s and %s; give each collection its own conv_id space", t.ConvID, o, path)
			}
			owner[t.ConvID] = path
		}
		name := collectionName(path)
		for i := range turns {
			t := &turns[i]
			if v, ok := t.Meta[CollectionKey]; ok && v != name {
				return 0, fmt.Errorf("transfer: %s: turn %s already has meta.%s %v (the fold's training file marks each turn's collection there)", path, t.ID(), CollectionKey, v)
			}
			if t.Meta == nil {
				t.Meta = map[string]any{}
			}
			t.Meta[CollectionKey] = name
		}
		all = append(all, turns...)
	}
	if err := os.MkdirAll(filepath.Dir(f.TrainAt), 0o755); err != nil {
		return 0, fmt.Errorf("transfer: %w", err)
	}
	if err := datasets.WriteJSONLContext(ctx, f.TrainAt, all); err != nil {
		return 0, fmt.Errorf("transfer: fold %s: %w", f.Name, err)
	}
	return len(all), nil
}

// RunTransfer runs every fold's runs, at most jobs at once: prepare writes
// the fold's training file once (before its first run), launch trains and
// evaluates one run. A failed run does not stop the others; errors come
// back per fold and run.
func RunTransfer(ctx context.Context, folds []TransferFold, jobs int,
	prepare func(context.Context, TransferFold) error,
	launch func(context.Context, TransferFold, TransferRun) error) [][]error {
	errs := make([][]error, len(folds))
	for i := range folds {
		errs[i] = make([]error, len(folds[i].Runs))
		if err := prepare(ctx, folds[i]); err != nil {
			for k := range errs[i] {
				errs[i][k] = err
			}
		}
	}
	var eg errgroup.Group
	eg.SetLimit(max(1, jobs))
	for i, f := range folds {
		for k, r := range f.Runs {
			if errs[i][k] != nil {
				continue
			}
			eg.Go(func() error {
				if err := ctx.Err(); err != nil {
					errs[i][k] = err
					return nil
				}
				slog.Info("transfer run starting", "held_out", f.Name, "variant", r.Variant.Name)
				if errs[i][k] = launch(ctx, f, r); errs[i][k] != nil {
					slog.Error("transfer run failed", "held_out", f.Name, "variant", r.Variant.Name, "err", errs[i][k])
				} else {
					slog.Info("transfer run done", "held_out", f.Name, "variant", r.Variant.Name)
				}
				return nil
			})
		}
	}
	_ = eg.Wait()
	return errs
}

// TransferOptions are what `himes ablate transfer` passes on to every run,
// and where it writes.
type TransferOptions struct {
	// ConfigPath is the base config and Sets its --set overrides, given to
	// each run's `himes train` before the fold's own overrides.
	ConfigPath string
	Sets       []string
	// Jobs training runs go at once.
	Jobs int
	// Overwrite retrains runs whose directories exist; Resume keeps the
	// finished ones (KeepFinished) and resumes the others; with neither,
	// existing run directories are refused before anything starts.
	Overwrite, Resume bool
	// Out receives transfer.json, transfer.md and transfer.png (the folds'
	// directory of PlanTransfer).
	Out string
	// TrainerCmd, when set, starts a trainer server of its own for each run
	// (StartTrainer; a run needs a fresh policy, its evaluation the
	// checkpoints it saved) and hands it to both as trainer.endpoint;
	// TrainerTimeout bounds its start.
	TrainerCmd     string
	TrainerTimeout time.Duration
	// Recipes adds the recipes' table (each against SFT alone, paired by
	// turn, mean over seeds: AddRecipes) and recipes.png: --recipes.
	Recipes bool
	// Progress, when set, is told the runs ended (done or failed) of all
	// folds' runs: once with none ended as the transfer starts, then after
	// each run (a fold whose training file failed ends all its runs).
	Progress RunProgress
}

// Transfer trains and evaluates every fold's runs (PlanTransfer): each
// fold's training file is written once, each run is `himes train` on it
// then `himes eval --rewriter raw,concat,gold,policy` on the left-out
// collection, logging beside its run directory. It writes transfer.json,
// transfer.md and transfer.png to o.Out and the tables to stdout. A failed
// run does not stop the others; Transfer returns an error naming how many
// failed.
func Transfer(ctx context.Context, stdout io.Writer, base configs.Config, folds []TransferFold, o TransferOptions) error {
	if o.Overwrite && o.Resume {
		return errors.New("transfer: --resume and --overwrite exclude each other")
	}
	if !o.Overwrite && !o.Resume {
		for _, f := range folds {
			for _, r := range f.Runs {
				if _, err := os.Stat(r.RunDir); err == nil {
					return fmt.Errorf("transfer: run directory %s already exists (pass --resume to keep the finished runs, --overwrite to retrain)", r.RunDir)
				}
			}
		}
	}
	exe, err := himesBinary("transfer")
	if err != nil {
		return err
	}
	opts := datasets.LoadOptions{UserField: base.Data.UserField, SkipBad: base.Data.SkipBad}
	slog.Info("transfer", "folds", len(folds), "variants", len(folds[0].Runs), "jobs", o.Jobs, "out", o.Out)
	// With --resume the runs to keep are known before anything starts, so
	// that the progress counts (and its rate and ETA time) only the runs
	// that train.
	kept := map[string]bool{}
	refused := map[string]error{} // finished with another config or trainer command
	total := 0
	for _, f := range folds {
		for _, r := range f.Runs {
			if o.Resume {
				k, err := KeepFinished(o, f, r)
				if err != nil {
					refused[r.RunDir] = err
				} else if k {
					kept[r.RunDir] = true
					continue
				}
			}
			total++
		}
	}
	count := newRunCount(o.Progress, total)
	toDo := func(f TransferFold) (n int) {
		for _, r := range f.Runs {
			if !kept[r.RunDir] {
				n++
			}
		}
		return n
	}
	errs := RunTransfer(ctx, folds, o.Jobs,
		func(ctx context.Context, f TransferFold) error {
			n, err := WriteFoldTrain(ctx, f, opts)
			if err == nil {
				slog.Info("transfer fold", "held_out", f.Name, "train_turns", n, "train", f.TrainAt)
			} else {
				count.end(toDo(f), err)
			}
			return err
		},
		func(ctx context.Context, f TransferFold, r TransferRun) (err error) {
			if kept[r.RunDir] {
				slog.Info("transfer run kept: finished and evaluated with this config", "held_out", f.Name, "variant", r.Variant.Name)
				return nil
			}
			defer func() { count.end(1, err) }()
			if err := os.MkdirAll(filepath.Dir(r.RunDir), 0o755); err != nil {
				return err
			}
			mode := "--overwrite"
			if err := refused[r.RunDir]; err != nil {
				return err
			}
			if o.Resume {
				if _, err := os.Stat(r.RunDir); err == nil {
					mode = "--resume" // train checks the config and continues
					if o.TrainerCmd != "" {
						same, err := sameTrainerCmd(o.TrainerCmd, r)
						if err != nil {
							return err
						}
						if !same { // its trainer is unknown: its checkpoints are not to be continued
							slog.Warn("transfer run retrained: no record of the trainer command it ran with", "run", r.RunDir)
							mode = "--overwrite"
						}
					}
				}
			}
			train := []string{"train", "--config", o.ConfigPath, "--log-format", "json", mode}
			for _, s := range append(append([]string{}, o.Sets...), f.Overrides(r)...) {
				train = append(train, "--set", s)
			}
			logDir := filepath.Dir(r.RunDir)
			// Without a dev split the latest checkpoint, never the best:
			// data.eval is the left-out collection, so a best picked on it
			// would be picked on the test set. With one (data.dev_fraction)
			// the best was picked on in-domain dev turns, and is the model.
			ckpt := "latest"
			if base.Data.DevFraction > 0 {
				ckpt = "best"
			}
			eval := []string{"eval", "--run", r.RunDir, "--checkpoint", ckpt, "--rewriter", "raw,concat,gold,policy",
				"--out", r.EvalDir, "--log-format", "json"}
			if o.TrainerCmd != "" {
				// The trainer's flags are not in the run's config: recorded
				// beside it, so that --resume keeps only runs they trained.
				if err := os.MkdirAll(trainerDir(r), 0o755); err != nil {
					return err
				}
				if err := atomicfile.WriteFile(trainerCmdFile(r), []byte(o.TrainerCmd), 0o644); err != nil {
					return err
				}
				tp, err := StartTrainer(ctx, o.TrainerCmd, trainerDir(r),
					filepath.Join(logDir, r.RunName+".trainer.log"), o.TrainerTimeout)
				if err != nil {
					return err
				}
				defer func() {
					if err := tp.Stop(); err != nil {
						slog.Warn("trainer exited with an error", "run", r.RunDir, "err", err)
					}
				}()
				train = append(train, "--set", "trainer.endpoint="+tp.URL)
				eval = append(eval, "--set", "trainer.endpoint="+tp.URL)
			}
			if err := runChild(ctx, exe, train, filepath.Join(logDir, r.RunName+".train.log")); err != nil {
				return err
			}
			return runChild(ctx, exe, eval, filepath.Join(logDir, r.RunName+".eval.log"))
		})
	rows := GatherTransfer(folds, errs)
	if o.Recipes {
		AddRecipes(ctx, folds, errs, rows)
	}
	if err := atomicfile.WriteJSON(filepath.Join(o.Out, "transfer.json"), map[string]any{"folds": folds, "rows": rows}); err != nil {
		return err
	}
	var md strings.Builder
	md.WriteString("# Leave-one-collection-out transfer\n\n![Recall@10 per left-out collection](transfer.png)\n\n")
	if o.Recipes {
		md.WriteString("![Recipes against SFT alone](recipes.png)\n\n")
	}
	if err := WriteTransferMarkdown(&md, rows); err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(o.Out, "transfer.md"), []byte(md.String()), 0o644); err != nil {
		return err
	}
	if png, err := TransferPNG(rows); err != nil {
		slog.Warn("transfer plot not written", "err", err)
	} else if err := atomicfile.WriteFile(filepath.Join(o.Out, "transfer.png"), png, 0o644); err != nil {
		return err
	}
	if o.Recipes {
		if png, err := RecipesPNG(rows); err != nil {
			slog.Warn("recipes plot not written", "err", err)
		} else if err := atomicfile.WriteFile(filepath.Join(o.Out, "recipes.png"), png, 0o644); err != nil {
			return err
		}
	}
	if err := WriteTransferMarkdown(stdout, rows); err != nil {
		return err
	}
	failed := 0
	for _, fe := range errs {
		for _, e := range fe {
			if e != nil {
				failed++
			}
		}
	}
	if failed > 0 {
		return fmt.Errorf("transfer: %d runs failed (logs in %s)", failed, o.Out)
	}
	return nil
}

// KeepFinished reports whether a transfer with --resume keeps run r of fold
// f as it is: its training finished (a resume would do nothing), its
// evaluation was written after, and it ran with the config this transfer
// gives it. A finished run with another config is an error naming the
// changed keys: its numbers would enter the table under this config's name.
func KeepFinished(o TransferOptions, f TransferFold, r TransferRun) (bool, error) {
	statusAt, err := os.Stat(filepath.Join(r.RunDir, "status.json"))
	if err != nil {
		return false, nil
	}
	summaryAt, err := os.Stat(filepath.Join(r.EvalDir, "summary.json"))
	if err != nil || summaryAt.ModTime().Before(statusAt.ModTime()) {
		return false, nil
	}
	cfg, err := configs.Load(o.ConfigPath, append(slices.Clone(o.Sets), f.Overrides(r)...))
	if err != nil {
		return false, fmt.Errorf("transfer: %s: %w", r.RunDir, err)
	}
	if o.TrainerCmd != "" {
		// The run's policy was served by its own --trainer-cmd server, at a
		// URL of its own: the config's trainer.endpoint and launch section
		// were not used; the command it ran with must be this one.
		cfg.Trainer.Endpoint = "http://trainer-cmd"
		if same, err := sameTrainerCmd(o.TrainerCmd, r); err != nil || !same {
			return false, err
		}
	}
	if p, err := grpo.ReadRunProgress(r.RunDir, cfg.GRPO); err != nil || !p.Done {
		return false, err
	}
	saved, err := configs.LatestSnapshot(r.RunDir)
	if err != nil {
		return false, fmt.Errorf("transfer: %w", err)
	}
	old, err := os.ReadFile(saved)
	if err != nil {
		return false, fmt.Errorf("transfer: the finished run's config: %w", err)
	}
	now, err := cfg.YAML()
	if err != nil {
		return false, fmt.Errorf("transfer: render config: %w", err)
	}
	blocking, _, err := configs.ResumeChanges(old, now)
	if err != nil {
		return false, fmt.Errorf("transfer: compare with %s: %w", saved, err)
	}
	var changes []string
	for _, c := range blocking {
		changes = append(changes, c.String())
	}
	if len(changes) > 0 {
		return false, fmt.Errorf("transfer: finished run %s ran with another config (%s): %s; pass --overwrite to retrain it",
			r.RunDir, filepath.Base(saved), strings.Join(changes, "; "))
	}
	return true, nil
}

// trainerDir holds a --trainer-cmd server's port file, checkpoints and the
// command it ran (trainerCmdFile).
func trainerDir(r TransferRun) string {
	return filepath.Join(filepath.Dir(r.RunDir), r.RunName+".trainer")
}

func trainerCmdFile(r TransferRun) string { return filepath.Join(trainerDir(r), "command") }

// sameTrainerCmd reports whether run r ran with the trainer command cmd: a
// different recorded command is an error (its numbers are another
// trainer's); no record (a run from before the record) is false, and
// Transfer then trains the run afresh rather than trust or continue it.
func sameTrainerCmd(cmd string, r TransferRun) (bool, error) {
	old, err := os.ReadFile(trainerCmdFile(r))
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("transfer: %w", err)
	}
	if string(old) != cmd {
		return false, fmt.Errorf("transfer: finished run %s ran with another --trainer-cmd (%q, now %q); pass --overwrite to retrain it",
			r.RunDir, old, cmd)
	}
	return true, nil
}

// TransferMetrics are the metrics the transfer table reports, in order.
var TransferMetrics = []string{evaluate.MRecall10, evaluate.MNDCG3, evaluate.MMRR, evaluate.MReward}

// TransferCell is one system's estimate of one metric, with its paired
// comparison against the raw question where it has one.
type TransferCell struct {
	Estimate stats.Estimate    `json:"estimate"`
	VsRaw    *stats.Comparison `json:"vs_raw,omitempty"`
}

// TransferSystem is one row of a fold: a fixed rewriter (raw, concat, gold)
// or a trained variant's policy.
type TransferSystem struct {
	Name    string                  `json:"name"`
	Metrics map[string]TransferCell `json:"metrics"`
	// GapClosed is (policy − raw)/(gold − raw) on Recall@10: the share of the
	// raw → human-rewrite gap the rewriter closes; nil for the fixed systems
	// or when gold does not beat raw.
	GapClosed *float64 `json:"gap_closed_recall_10,omitempty"`
	// Base and Seed name the recipe and seed of a run repeated over seeds.
	Base string `json:"base,omitempty"`
	Seed int    `json:"seed,omitempty"`
}

// TransferRow is one left-out collection's results.
type TransferRow struct {
	HeldOut       string           `json:"held_out"`
	TrainedOn     []string         `json:"trained_on"`
	Turns         int              `json:"turns"`
	Conversations int              `json:"conversations"`
	Systems       []TransferSystem `json:"systems"`
	// OverSeeds summarizes each recipe repeated over seeds (empty without
	// --seeds): the seeds' spread, not the turns', is the uncertainty of a
	// recipe's result.
	OverSeeds []TransferSeedSummary `json:"over_seeds,omitempty"`
	// VsSFT compares each recipe trained beyond SFT with SFT alone, paired
	// by turn (transfer_paired.go); empty without an sft recipe.
	VsSFT []TransferPaired `json:"vs_sft,omitempty"`
	// Recipes sets each recipe against SFT alone, paired by turn and
	// averaged over seeds (AddRecipes; --recipes only).
	Recipes []TransferRecipePaired `json:"recipes,omitempty"`
	Errors  []string               `json:"errors,omitempty"`
	// bootstrap is the runs' evaluations' resampling, for AddRecipes.
	bootstrap *stats.Config
}

// TransferSeedSummary is one recipe of a fold over its seeds' runs: the
// share of the gap closed and Recall@10, each as mean ± sd with a Student-t
// interval over the seeds that finished, and their range.
type TransferSeedSummary struct {
	Variant   string   `json:"variant"`
	Seeds     []int    `json:"seeds"` // the seeds that finished
	Failed    int      `json:"failed"`
	GapClosed SeedStat `json:"gap_closed_recall_10"`
	GapMin    *float64 `json:"gap_closed_min,omitempty"`
	GapMax    *float64 `json:"gap_closed_max,omitempty"`
	Recall10  SeedStat `json:"recall_10"`
}

// seedLevel is the confidence level of the over-seeds intervals.
const seedLevel = 0.95

// summarizeSeeds groups a fold's seeded runs by recipe.
func summarizeSeeds(f TransferFold, row TransferRow) []TransferSeedSummary {
	var out []TransferSeedSummary
	index := map[string]int{}
	gaps := map[string][]float64{}
	recalls := map[string][]float64{}
	for _, r := range f.Runs {
		v := r.Variant
		if v.Base == "" {
			continue
		}
		i, ok := index[v.Base]
		if !ok {
			i = len(out)
			index[v.Base] = i
			out = append(out, TransferSeedSummary{Variant: v.Base})
		}
		s := row.system(v.Name)
		if s == nil || s.GapClosed == nil || math.IsNaN(*s.GapClosed) {
			out[i].Failed++
			continue
		}
		out[i].Seeds = append(out[i].Seeds, v.Seed)
		gaps[v.Base] = append(gaps[v.Base], *s.GapClosed)
		recalls[v.Base] = append(recalls[v.Base], s.Metrics[evaluate.MRecall10].Estimate.Mean)
	}
	for i := range out {
		g := gaps[out[i].Variant]
		out[i].GapClosed = seedStat(g)
		out[i].Recall10 = seedStat(recalls[out[i].Variant])
		if len(g) > 0 {
			lo, hi := slices.Min(g), slices.Max(g)
			out[i].GapMin, out[i].GapMax = &lo, &hi
		}
	}
	return out
}

func seedStat(xs []float64) SeedStat {
	s := stats.TInterval(xs, seedLevel)
	return SeedStat{N: s.N, Mean: finitePtr(s.Mean), SD: finitePtr(s.SD), Lo: finitePtr(s.Lo), Hi: finitePtr(s.Hi)}
}

// GatherTransfer reads each run's evaluation (summary.json) into one row
// per fold. The fixed systems come from the first run that evaluated them;
// each variant contributes its policy row.
func GatherTransfer(folds []TransferFold, errs [][]error) []TransferRow {
	rows := make([]TransferRow, len(folds))
	for i, f := range folds {
		row := TransferRow{HeldOut: f.Name}
		for _, t := range f.Train {
			row.TrainedOn = append(row.TrainedOn, collectionName(t))
		}
		fixed := map[string]bool{}
		var policies []TransferSystem
		var bootstrap *stats.Config // the runs' evaluations', for the paired comparisons
		for k, r := range f.Runs {
			if errs != nil && errs[i][k] != nil {
				row.Errors = append(row.Errors, fmt.Sprintf("%s: %v", r.Variant.Name, errs[i][k]))
				continue
			}
			rep, err := readEvalSummary(filepath.Join(r.EvalDir, "summary.json"))
			if err != nil {
				row.Errors = append(row.Errors, fmt.Sprintf("%s: %v", r.Variant.Name, err))
				continue
			}
			row.Turns, row.Conversations = rep.Turns, rep.Conversations
			if bootstrap == nil {
				bootstrap = &rep.Stats
			}
			for _, s := range rep.Systems {
				if s.Memory {
					continue
				}
				sys := TransferSystem{Name: s.Name, Metrics: map[string]TransferCell{}}
				for _, m := range TransferMetrics {
					e, ok := s.Metrics[m]
					if !ok {
						continue
					}
					c := TransferCell{Estimate: e}
					if cmp, ok := s.VsBaseline[m]; ok && s.Name != "raw" {
						c.VsRaw = &cmp
					}
					sys.Metrics[m] = c
				}
				switch s.Name {
				case "policy":
					sys.Name, sys.Base, sys.Seed = r.Variant.Name, r.Variant.Base, r.Variant.Seed
					policies = append(policies, sys)
				default:
					if !fixed[s.Name] {
						fixed[s.Name] = true
						row.Systems = append(row.Systems, sys)
					}
				}
			}
		}
		row.Systems = append(row.Systems, policies...)
		raw, gold := row.system("raw"), row.system("gold")
		for k := range row.Systems {
			s := &row.Systems[k]
			if s.Name == "raw" || s.Name == "concat" || s.Name == "gold" || raw == nil || gold == nil {
				continue
			}
			r, g := raw.Metrics[evaluate.MRecall10], gold.Metrics[evaluate.MRecall10]
			p, ok := s.Metrics[evaluate.MRecall10]
			if gap := g.Estimate.Mean - r.Estimate.Mean; ok && gap > 0 {
				v := (p.Estimate.Mean - r.Estimate.Mean) / gap
				s.GapClosed = &v
			}
		}
		row.OverSeeds = summarizeSeeds(f, row)
		row.bootstrap = bootstrap
		if bootstrap != nil {
			paired, perrs := pairedVsSFT(context.Background(), f, func(k int) bool { return errs != nil && errs[i][k] != nil }, *bootstrap)
			row.VsSFT = paired
			row.Errors = append(row.Errors, perrs...)
		}
		rows[i] = row
	}
	return rows
}

func (r TransferRow) system(name string) *TransferSystem {
	for i := range r.Systems {
		if r.Systems[i].Name == name {
			return &r.Systems[i]
		}
	}
	return nil
}

func readEvalSummary(path string) (evaluate.Report, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return evaluate.Report{}, err
	}
	var rep evaluate.Report
	if err := json.Unmarshal(raw, &rep); err != nil {
		return rep, fmt.Errorf("%s: %w", path, err)
	}
	return rep, nil
}

// WriteTransferMarkdown writes one table per metric (rows: left-out
// collections; columns: systems, each mean [CI], with Δ vs raw and its p for
// the rewriters) and the gap-closed table.
func WriteTransferMarkdown(w io.Writer, rows []TransferRow) error {
	var b strings.Builder
	names := transferSystemNames(rows)
	for _, m := range TransferMetrics {
		fmt.Fprintf(&b, "### %s\n\n| left out | turns |", m)
		for _, n := range names {
			fmt.Fprintf(&b, " %s |", evaluate.MarkdownEscape(n))
		}
		b.WriteString("\n|---|---:|" + strings.Repeat("---:|", len(names)) + "\n")
		for _, r := range rows {
			fmt.Fprintf(&b, "| %s | %d |", evaluate.MarkdownEscape(r.HeldOut), r.Turns)
			for _, n := range names {
				s := r.system(n)
				c, ok := TransferCell{}, false
				if s != nil {
					c, ok = s.Metrics[m]
				}
				if !ok {
					b.WriteString(" – |")
					continue
				}
				fmt.Fprintf(&b, " %.3f [%.3f, %.3f]", c.Estimate.Mean, c.Estimate.Lo, c.Estimate.Hi)
				if c.VsRaw != nil {
					fmt.Fprintf(&b, " (Δ %+.3f, p %.3f)", c.VsRaw.Diff, c.VsRaw.P)
				}
				b.WriteString(" |")
			}
			b.WriteString("\n")
		}
		b.WriteString("\n")
	}
	b.WriteString("### share of the raw → human-rewrite Recall@10 gap closed\n\n| left out |")
	var learned []string
	for _, n := range names {
		if n != "raw" && n != "concat" && n != "gold" {
			learned = append(learned, n)
		}
	}
	for _, n := range learned {
		fmt.Fprintf(&b, " %s |", evaluate.MarkdownEscape(n))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(learned)) + "\n")
	for _, r := range rows {
		fmt.Fprintf(&b, "| %s |", evaluate.MarkdownEscape(r.HeldOut))
		for _, n := range learned {
			if s := r.system(n); s != nil && s.GapClosed != nil && !math.IsNaN(*s.GapClosed) {
				fmt.Fprintf(&b, " %.0f%% |", 100**s.GapClosed)
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}
	writeSeedSummaries(&b, rows)
	writePairedVsSFT(&b, rows)
	writeRecipesVsSFT(&b, rows)
	for _, r := range rows {
		for _, e := range r.Errors {
			fmt.Fprintf(&b, "\nfold %s failed: %s\n", evaluate.MarkdownEscape(r.HeldOut), evaluate.MarkdownEscape(strings.ReplaceAll(e, "\n", " ")))
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeSeedSummaries adds the over-seeds table when recipes were repeated
// over seeds: per fold and recipe, the gap closed as mean ± sd [t interval]
// (min–max) and Recall@10's mean ± sd.
func writeSeedSummaries(b *strings.Builder, rows []TransferRow) {
	var recipes []string
	seen := map[string]bool{}
	for _, r := range rows {
		for _, s := range r.OverSeeds {
			if !seen[s.Variant] {
				seen[s.Variant] = true
				recipes = append(recipes, s.Variant)
			}
		}
	}
	if len(recipes) == 0 {
		return
	}
	fmt.Fprintf(b, "\n### over seeds: share of the gap closed, mean ± sd [%.0f%% Student-t interval] (min – max); Recall@10 mean ± sd\n\n| left out |", 100*seedLevel)
	for _, n := range recipes {
		fmt.Fprintf(b, " %s |", evaluate.MarkdownEscape(n))
	}
	b.WriteString("\n|---|" + strings.Repeat("---:|", len(recipes)) + "\n")
	pct := func(v *float64) string {
		if v == nil {
			return "–"
		}
		return fmt.Sprintf("%.0f%%", 100**v)
	}
	for _, r := range rows {
		fmt.Fprintf(b, "| %s |", evaluate.MarkdownEscape(r.HeldOut))
		for _, n := range recipes {
			var s *TransferSeedSummary
			for k := range r.OverSeeds {
				if r.OverSeeds[k].Variant == n {
					s = &r.OverSeeds[k]
				}
			}
			switch {
			case s == nil || s.GapClosed.Mean == nil:
				b.WriteString(" – |")
				continue
			case s.GapClosed.SD == nil:
				fmt.Fprintf(b, " %s (1 seed)", pct(s.GapClosed.Mean))
			default:
				fmt.Fprintf(b, " %s ± %s [%s, %s] (%s – %s); R@10 %.3f ± %.3f", pct(s.GapClosed.Mean), pct(s.GapClosed.SD),
					pct(s.GapClosed.Lo), pct(s.GapClosed.Hi), pct(s.GapMin), pct(s.GapMax), *s.Recall10.Mean, *s.Recall10.SD)
			}
			if s.Failed > 0 {
				fmt.Fprintf(b, ", %d failed", s.Failed)
			}
			if s.GapClosed.SD == nil && s.Failed == 0 {
				b.WriteString(" |") // "(1 seed)" said it
				continue
			}
			fmt.Fprintf(b, ", %d seeds |", len(s.Seeds))
		}
		b.WriteString("\n")
	}
}

// transferSystemNames lists the systems in table order: the fixed ones, then
// the variants, as they first appear.
func transferSystemNames(rows []TransferRow) []string {
	var names []string
	seen := map[string]bool{}
	for _, r := range rows {
		for _, s := range r.Systems {
			if !seen[s.Name] {
				seen[s.Name] = true
				names = append(names, s.Name)
			}
		}
	}
	return names
}

// TransferPNG draws Recall@10 per left-out collection for every system, with
// 95% intervals (over conversations; a recipe repeated over seeds is one bar,
// its mean over the seeds with their Student-t interval).
func TransferPNG(rows []TransferRow) ([]byte, error) {
	names := transferSystemNames(rows)
	seeded := map[string]bool{}
	var recipes []string
	for _, r := range rows {
		for _, s := range r.OverSeeds {
			if !slices.Contains(recipes, s.Variant) {
				recipes = append(recipes, s.Variant)
			}
		}
		for _, f := range r.Systems {
			if f.Base != "" {
				seeded[f.Name] = true
			}
		}
	}
	var shown []string
	for _, n := range names {
		if !seeded[n] {
			shown = append(shown, n)
		}
	}
	groups := make([]string, len(rows))
	series := make([]report.BarSeries, 0, len(shown)+len(recipes))
	for _, n := range append(shown, recipes...) {
		series = append(series, report.BarSeries{Name: n, Mean: make([]float64, len(rows)), Lo: make([]float64, len(rows)), Hi: make([]float64, len(rows))})
	}
	for i, r := range rows {
		groups[i] = r.HeldOut
		for k := range series {
			series[k].Mean[i], series[k].Lo[i], series[k].Hi[i] = math.NaN(), math.NaN(), math.NaN()
			if k < len(shown) {
				if s := r.system(shown[k]); s != nil {
					if c, ok := s.Metrics[evaluate.MRecall10]; ok {
						series[k].Mean[i], series[k].Lo[i], series[k].Hi[i] = c.Estimate.Mean, c.Estimate.Lo, c.Estimate.Hi
					}
				}
				continue
			}
			for _, s := range r.OverSeeds {
				if s.Variant == series[k].Name && s.Recall10.Mean != nil {
					series[k].Mean[i] = *s.Recall10.Mean
					// One seed has no interval: a bar without an error bar.
					series[k].Lo[i], series[k].Hi[i] = *s.Recall10.Mean, *s.Recall10.Mean
					if s.Recall10.Lo != nil && s.Recall10.Hi != nil {
						series[k].Lo[i], series[k].Hi[i] = *s.Recall10.Lo, *s.Recall10.Hi
					}
				}
			}
		}
	}
	return report.BarChart("Leave one collection out: Recall@10 on the left-out collection", "Recall@10 (95% CI)", groups, series)
}
