package main

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
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
	// held-out turns, SFT the turns with a human rewrite.
	Train, Eval, SFT []datasets.Turn
}

// buildOptions adjust wiring for a command.
type buildOptions struct {
	// trainerDir is where the embedded policy saves checkpoints (the run
	// directory's trainer/ for `himes train`).
	trainerDir string
}

// buildComponents loads the data and builds retrieval, responder, reward and
// policy from the config.
func buildComponents(ctx context.Context, cfg configs.Config, opts buildOptions) (*components, error) {
	c := &components{}
	load := dataLoadOptions(cfg.Data)
	all, st, err := datasets.LoadContext(ctx, cfg.Data.Train, load)
	if err != nil {
		return nil, fmt.Errorf("load training data: %w", err)
	}
	slog.Info("loaded training data", "file", cfg.Data.Train, "turns", st.Records)
	train, eval := all, []datasets.Turn(nil)
	if cfg.Data.Eval != "" {
		if eval, _, err = datasets.LoadContext(ctx, cfg.Data.Eval, load); err != nil {
			return nil, fmt.Errorf("load eval data: %w", err)
		}
	} else if cfg.Data.EvalFraction > 0 {
		train, eval = datasets.SplitByConversation(all, cfg.Data.EvalFraction, cfg.Run.Seed)
	}
	c.SFT = train
	if cfg.Data.SFT != "" {
		if c.SFT, _, err = datasets.LoadContext(ctx, cfg.Data.SFT, load); err != nil {
			return nil, fmt.Errorf("load SFT data: %w", err)
		}
	}
	for _, t := range train {
		if t.Answer != "" {
			c.Train = append(c.Train, t)
		}
	}
	for _, t := range eval {
		if t.Answer != "" {
			c.Eval = append(c.Eval, t)
		}
	}

	if cfg.Data.KB == "" {
		return nil, fmt.Errorf("data.kb is required: retrieval needs a knowledge base")
	}
	if c.Retriever, err = retrieval.Open(ctx, cfg.Retrieval, cfg.Data.KB); err != nil {
		return nil, fmt.Errorf("retrieval: %w", err)
	}
	c.Retrieve = c.Retriever
	if cfg.Retrieval.Memory.Enabled {
		if c.Retrieve, err = retrieval.AttachMemory(ctx, cfg.Retrieval.Memory, c.Retriever, memoryEntries(train)); err != nil {
			return nil, err
		}
	}
	if c.Renderer, err = datasets.NewRenderer(cfg.Data.Prompt); err != nil {
		return nil, fmt.Errorf("data.prompt: %w", err)
	}
	if c.Scorer, err = hser.NewScorer(cfg.Reward); err != nil {
		return nil, fmt.Errorf("reward: %w", err)
	}
	if c.Responder, err = rollout.NewResponder(ctx, cfg.Rollout); err != nil {
		return nil, fmt.Errorf("responder: %w", err)
	}
	if c.Runner, err = rollout.NewRunner(cfg.Rollout, c.Retrieve, c.Responder, c.Scorer); err != nil {
		return nil, fmt.Errorf("rollout runner: %w", err)
	}
	tcfg := cfg.Trainer
	if opts.trainerDir != "" {
		tcfg.Embedded.CheckpointDir = opts.trainerDir
	}
	if c.Policy, err = trainer.Open(ctx, tcfg, c.Retriever); err != nil {
		return nil, fmt.Errorf("trainer: %w", err)
	}
	return c, nil
}

// Close releases network responders' connections.
func (c *components) Close() {
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

// memoryEntries are the training conversations' user questions, with when
// each was asked, as long-term memory entries.
func memoryEntries(turns []datasets.Turn) []retrieval.MemoryEntry {
	hist := datasets.HistoricalQueries(turns)
	entries := make([]retrieval.MemoryEntry, 0, len(hist))
	for _, q := range hist {
		entries = append(entries, retrieval.MemoryEntry{User: q.User, Query: q.Query, Time: time.Unix(q.Time, 0).UTC()})
	}
	return entries
}

// dataLoadOptions are the loader options of the data section: the user
// field and the input size bounds.
func dataLoadOptions(c datasets.Config) datasets.LoadOptions {
	return datasets.LoadOptions{UserField: c.UserField, MaxFieldBytes: c.MaxFieldBytes, MaxRecordBytes: c.MaxRecordBytes}
}
