package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/progress"
	"github.com/himes-rl/himes/memory"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
	"github.com/himes-rl/himes/trainer/embedded"
)

// components are the pieces a run config describes, built once and shared
// by train and eval.
type components struct {
	// Retriever is the pipeline (BM25, embedder, memory store, IDF for the
	// embedded policy); Retrieve is the view rollouts and evaluations call,
	// which keeps long-term memory causal (see retrieval.CausalRetriever).
	Retriever *retrieval.Pipeline
	Retrieve  retrieval.Retriever
	Responder rollout.Responder
	Scorer    *hser.Scorer
	Policy    trainer.Policy
	Renderer  *datasets.Renderer
	Runner    *rollout.Runner
	// Train is the GRPO prompt set (turns with a reference answer), Eval the
	// held-out turns, SFT the turns with a human rewrite, Dev the in-domain
	// dev split carved from the training file (data.dev_fraction; empty when
	// off), on which training evaluates and picks its best checkpoint.
	Train, Eval, SFT, Dev []datasets.Turn
	// known are all training and held-out turns: their users' facts and
	// questions are the long-term memory.
	known []datasets.Turn
	// causal is the causal view of the long-term memory (nil when none is
	// built): prompts take their memories from it (data.prompt.memories).
	causal *retrieval.CausalRetriever
}

// buildOptions adjust wiring for a command.
type buildOptions struct {
	// trainerDir is where the embedded policy saves checkpoints (the run
	// directory's trainer/ for `himes train`).
	trainerDir string
}

// buildComponents loads the data and builds retrieval, responder, reward and
// policy from the config.
func buildComponents(ctx context.Context, cfg configs.Config, opts buildOptions) (_ *components, err error) {
	c := &components{}
	defer func() {
		if err != nil {
			c.Close()
		}
	}()
	// What needs neither the data nor the index comes first, so that a
	// missing model, an unreachable server or a bad reward setting is
	// reported before the minutes a large knowledge base takes to load.
	if c.Scorer, err = hser.NewScorer(cfg.Reward); err != nil {
		return nil, fmt.Errorf("reward: %w", err)
	}
	if c.Responder, err = rollout.NewResponder(ctx, cfg.Rollout); err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	tcfg := cfg.Trainer
	if opts.trainerDir != "" {
		tcfg.Embedded.CheckpointDir = opts.trainerDir
	}
	if tcfg.Endpoint != "embedded" {
		if c.Policy, err = trainer.Dial(ctx, tcfg); err != nil {
			return nil, fmt.Errorf("trainer: %w", err)
		}
	}

	// GRPO prompts and held-out turns are rendered from their question:
	// a record without one is refused at load, with its file and line.
	load := cfg.Data.LoadOptions()
	load.RequireQuestion = true
	all, st, err := datasets.LoadContext(ctx, cfg.Data.Train, load)
	if err != nil {
		return nil, fmt.Errorf("load training data: %w", err)
	}
	slog.Info("loaded training data", "file", cfg.Data.Train, "turns", st.Records)
	var heldOut []datasets.Turn
	if cfg.Data.Eval != "" {
		if heldOut, _, err = datasets.LoadContext(ctx, cfg.Data.Eval, load); err != nil {
			return nil, fmt.Errorf("load eval data: %w", err)
		}
	}
	train, eval, dev, err := datasets.RunSplits(all, heldOut, cfg.Data, cfg.Run.Seed)
	if err != nil {
		return nil, fmt.Errorf("splits of %s: %w", cfg.Data.Train, err)
	}
	c.SFT = train
	if cfg.Data.SFT != "" {
		sftLoad := cfg.Data.LoadOptions() // SFT pairs may come from a rewrite alone
		if c.SFT, _, err = datasets.LoadContext(ctx, cfg.Data.SFT, sftLoad); err != nil {
			return nil, fmt.Errorf("load SFT data: %w", err)
		}
	}
	if err := checkHeldOutIsHeldOut(cfg.Data, train, eval, dev, c.SFT); err != nil {
		return nil, err
	}
	c.Train = datasets.PromptTurns(train, cfg.Data.JudgedOnly)
	c.Eval = datasets.PromptTurns(eval, cfg.Data.JudgedOnly)
	c.Dev = datasets.PromptTurns(dev, cfg.Data.JudgedOnly)
	what := "a reference answer"
	if cfg.Data.JudgedOnly {
		what += " and relevance judgments (data.judged_only)"
		slog.Info("judged turns only", "prompts", len(c.Train), "held_out", len(c.Eval))
	}
	if cfg.Data.Eval != "" && len(c.Eval) == 0 {
		// A run would have no evaluation and no best checkpoint, silently.
		return nil, fmt.Errorf("data.eval %s: no held-out turn with %s (%d turns): fix the file, or leave data.eval empty to hold out data.eval_fraction of the training conversations",
			cfg.Data.Eval, what, len(eval))
	}

	if cfg.Data.DevFraction > 0 {
		slog.Info("dev split: the training loop evaluates and picks its best checkpoint on it (data.dev_fraction)",
			"dev_turns", len(c.Dev), "train_turns", len(c.Train))
		if len(c.Dev) == 0 {
			return nil, fmt.Errorf("data.dev_fraction %v: the dev split of %s has no turn with %s (%d turns): raise it, or set it to 0",
				cfg.Data.DevFraction, cfg.Data.Train, what, len(dev))
		}
	}
	// The held-out turns too: the in-loop evaluation rolls them out.
	if err := rollout.CheckRetrievalReward(cfg.Reward, slices.Concat(c.Train, c.Eval, c.Dev), cfg.Retrieval.Candidates, slog.Default()); err != nil {
		return nil, err
	}

	if cfg.Data.KB == "" && !cfg.Retrieval.UsesService() {
		return nil, fmt.Errorf("data.kb is required: retrieval method %s needs a knowledge base", cfg.Retrieval.Method)
	}
	// Dense and hybrid retrieval embed the knowledge base once (then cached):
	// minutes to hours with a real model on a CPU, so it shows progress.
	// The bar is made on the first count, so runs that embed nothing show none.
	var embedBar *progress.Bar
	c.Retriever, err = retrieval.Open(ctx, cfg.Retrieval, cfg.Data.KB, retrieval.WithEmbedProgress(func(done, total int) {
		if embedBar == nil {
			embedBar = progress.New(outputFrom(ctx, os.Stderr), progress.Options{Label: "embedding knowledge base", Unit: "text", Total: total})
		}
		embedBar.Update(done, "")
	}))
	if embedBar != nil {
		embedBar.Finish()
	}
	if err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	c.Retrieve = c.Retriever
	if cfg.Data.KB != "" {
		// The held-out splits' judgments make the retrieval metrics; the
		// training prompts' make a reward only with a retrieval term.
		splits := []judgedSplit{{"the dev split (data.dev_fraction)", cfg.Data.Train, c.Dev}}
		if cfg.Reward.Retrieval() {
			splits = append(splits, judgedSplit{"data.train", cfg.Data.Train, c.Train})
		}
		if cfg.Data.Eval != "" {
			splits = append(splits, judgedSplit{"data.eval", cfg.Data.Eval, c.Eval})
		} else {
			splits = append(splits, judgedSplit{"the held-out split (data.eval_fraction)", cfg.Data.Train, c.Eval})
		}
		if err := checkJudgedCoverage(cfg.Data.KB, splits, c.Retriever.HasPassage, slog.Default()); err != nil {
			return nil, err
		}
	}
	c.known = dedupTurns(train, dev, eval)
	if err := c.attachMemory(ctx, cfg, c.known); err != nil {
		return nil, err
	}
	if c.Renderer, err = c.newRenderer(cfg); err != nil {
		return nil, err
	}
	if c.Runner, err = rollout.NewRunner(cfg.Rollout, c.Retrieve, c.Responder, c.Scorer); err != nil {
		return nil, fmt.Errorf("rollout runner: %w", err)
	}
	if cfg.Data.Prompt.Memories.Enabled && tcfg.Endpoint != "embedded" && !strings.Contains(cfg.Data.Prompt.Template, ".Memories") {
		slog.Warn("data.prompt.memories is on but the prompt template does not show .Memories: an LLM rewriter sees them only in prompt.dialogue.memories")
	}
	if tcfg.Endpoint == "embedded" && !c.Retriever.HasTermStats() {
		slog.Warn("the embedded policy's idf feature is 0: no knowledge base to take term statistics from (set data.kb to the service's corpus)",
			"method", cfg.Retrieval.Method)
	}
	if tcfg.Endpoint == "embedded" {
		if c.Policy, err = embedded.New(tcfg.Embedded, c.Retriever); err != nil {
			return nil, fmt.Errorf("trainer: %w", err)
		}
	}
	return c, nil
}

// Close releases network responders' and retrieval services' connections.
func (c *components) Close() {
	if c.Retriever != nil {
		c.Retriever.Close()
	}
	if cl, ok := c.Responder.(interface{ Close() }); ok {
		cl.Close()
	}
}

// rankPassages is the passage-level ranking used for Recall@10 and MRR
// during training (the same ranking eval and TREC runs use).
func (c *components) rankPassages(ctx context.Context, user, rewrite, query string) ([]retrieval.Scored, error) {
	res, err := c.Retrieve.Retrieve(ctx, user, rewrite, query)
	if err != nil {
		return nil, err
	}
	return retrieval.PassageRanking(res), nil
}

// newRenderer is the rewriter prompt renderer of cfg; with
// data.prompt.memories on, each prompt shows the top_n memories its user
// had before the turn (activated with the raw question and cfg's
// retrieval.memory signals; see retrieval.CausalRetriever.ActivateBefore).
func (c *components) newRenderer(cfg configs.Config) (*datasets.Renderer, error) {
	var opts []datasets.RendererOption
	if pm := cfg.Data.Prompt.Memories; pm.Enabled {
		sig := cfg.Retrieval.Memory.Signals
		opts = append(opts, datasets.WithMemories(func(ctx context.Context, t datasets.Turn) ([]datasets.PromptMemory, error) {
			if c.causal == nil {
				return nil, errors.New("no long-term memory was built")
			}
			user := t.User
			if user == "" {
				user = t.ConvID // as datasets.UserMemories names users
			}
			mems, err := c.causal.ActivateBefore(ctx, user, strings.TrimSpace(t.Question), sig, pm.TopN)
			if err != nil {
				return nil, err
			}
			out := make([]datasets.PromptMemory, len(mems))
			for i, m := range mems {
				out[i] = datasets.PromptMemory{ID: m.ID, Text: m.Text, Score: m.Score}
			}
			return out, nil
		}))
	}
	r, err := datasets.NewRenderer(cfg.Data.Prompt, opts...)
	if err != nil {
		return nil, fmt.Errorf("data.prompt: %w", err)
	}
	return r, nil
}

// attachMemory gives the pipeline the long-term memory of the turns (their
// users' facts and questions, next to retrieval.memory.partitions) when
// memory is on (to re-rank, or as rewriter input: data.prompt.memories),
// and makes Retrieve its causal view: each turn sees what its user had
// before it, so a held-out user has memory from their second turn on.
// Labels of relevant memories must name memories the user has.
func (c *components) attachMemory(ctx context.Context, cfg configs.Config, turns []datasets.Turn) error {
	if !cfg.Retrieval.Memory.Enabled && !cfg.Data.Prompt.Memories.Enabled {
		return nil
	}
	entries, err := memoryEntries(turns)
	if err != nil {
		return fmt.Errorf("long-term memory: %w", err)
	}
	causal, err := retrieval.AttachMemory(ctx, cfg.Retrieval.Memory, c.Retriever, entries)
	if err != nil {
		return err
	}
	mem := c.Retriever.Memory()
	for _, t := range turns {
		for _, id := range t.MemoryLabels {
			if _, ok := mem.Lookup(t.User, id); !ok {
				return fmt.Errorf("turn %s: %s names memory %q, which user %q does not have", t.ID(), cfg.Data.MemoryLabelsField, id, t.User)
			}
		}
	}
	c.Retrieve, c.causal = causal, causal
	return nil
}

// dedupTurns concatenates turn lists, keeping the first of turns with the
// same id (evaluating on training data must not remember a question twice).
func dedupTurns(lists ...[]datasets.Turn) []datasets.Turn {
	seen := map[string]bool{}
	var out []datasets.Turn
	for _, l := range lists {
		for _, t := range l {
			if !seen[t.ID()] {
				seen[t.ID()] = true
				out = append(out, t)
			}
		}
	}
	return out
}

// memoryEntries are the long-term memories the turns carry (see
// datasets.UserMemories): each user's facts, and their questions with their
// position in the user's history (as Seq, and as that many seconds after
// the Unix epoch, which keeps the order).
func memoryEntries(turns []datasets.Turn) ([]memory.Entry, error) {
	recs, err := datasets.UserMemories(turns)
	if err != nil {
		return nil, err
	}
	entries := make([]memory.Entry, 0, len(recs))
	for _, r := range recs {
		e := memory.Entry{User: r.User, ID: r.ID, Text: r.Text, Seq: r.Seq}
		if r.Seq > 0 {
			e.Time = time.Unix(r.Seq, 0).UTC()
		}
		entries = append(entries, e)
	}
	return entries, nil
}

// checkHeldOutIsHeldOut refuses held-out turns from a conversation the run
// trains on (data.eval sharing conversations with data.train, or data.sft
// holding conversations that the eval or dev split holds out): the
// evaluation, and the best checkpoint chosen on it, would measure what the
// policy was trained on.
func checkHeldOutIsHeldOut(d datasets.Config, train, eval, dev, sft []datasets.Turn) error {
	for _, c := range []struct {
		key, split  string
		turns, held []datasets.Turn
	}{
		{"data.train", "the held-out turns (" + heldOutSource(d) + ")", train, eval},
		{"data.sft", "the held-out turns (" + heldOutSource(d) + ")", sft, eval},
		{"data.sft", fmt.Sprintf("the dev split (data.dev_fraction %v of data.train)", d.DevFraction), sft, dev},
	} {
		if c.key == "data.sft" && d.SFT == "" {
			continue // the SFT pairs are the training split's
		}
		if shared := datasets.SharedConversations(c.turns, c.held); len(shared) > 0 {
			return fmt.Errorf("%s and %s share %d conversations (e.g. %s): the evaluation would measure training conversations; hold out others",
				c.key, c.split, len(shared), shared[0])
		}
	}
	return nil
}

func heldOutSource(d datasets.Config) string {
	if d.Eval != "" {
		return "data.eval " + d.Eval
	}
	return fmt.Sprintf("data.eval_fraction %v of data.train", d.EvalFraction)
}
