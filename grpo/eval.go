package grpo

import (
	"context"
	"fmt"
	"log/slog"
	"math"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// evalSeed is fixed so that every evaluation of a run samples the same way;
// greedy decoding makes it irrelevant for most endpoints anyway.
const evalSeed = 20260

// evaluate scores the policy's greedy rewrites on the held-out turns, and
// the raw question as a fixed baseline, and appends an "eval" line.
func (l *Loop) evaluate(ctx context.Context, step int, phase string) error {
	turns := l.deps.Eval
	if l.cfg.EvalTurns > 0 && len(turns) > l.cfg.EvalTurns {
		turns = turns[:l.cfg.EvalTurns]
	}
	if len(turns) == 0 {
		if phase != "init" {
			l.state.EvalDone = true
		}
		return nil
	}
	prompts, err := l.render(turns)
	if err != nil {
		return err
	}
	resp, err := l.deps.Policy.Sample(ctx, trainer.SampleRequest{
		Prompts: prompts, N: 1, Temperature: 0, TopP: 1, MaxTokens: l.cfg.MaxTokens, Seed: evalSeed,
	})
	if err != nil {
		return fmt.Errorf("eval at step %d: sample: %w", step, err)
	}
	if len(resp.Samples) != len(turns) {
		return fmt.Errorf("eval at step %d: trainer returned %d samples for %d prompts", step, len(resp.Samples), len(turns))
	}
	policyRewrites := make([]string, len(turns))
	rawRewrites := make([]string, len(turns))
	for i, s := range resp.Samples {
		policyRewrites[i] = s.Text
		rawRewrites[i] = turns[i].Question
	}
	polRecs, err := l.evalRollouts(ctx, step, turns, policyRewrites, resp.PolicyVersion)
	if err != nil {
		return fmt.Errorf("eval at step %d (policy): %w", step, err)
	}
	rawRecs, err := l.evalRollouts(ctx, step, turns, rawRewrites, resp.PolicyVersion)
	if err != nil {
		return fmt.Errorf("eval at step %d (raw): %w", step, err)
	}
	// The two systems are compared on the turns both completed: averaging
	// each over its own successes would compare different turns.
	both := make([]bool, len(turns))
	compared := 0
	for i := range turns {
		if both[i] = !polRecs[i].Failed() && !rawRecs[i].Failed(); both[i] {
			compared++
		}
	}
	pol, err := l.evalSystem(ctx, turns, policyRewrites, polRecs, both)
	if err != nil {
		return fmt.Errorf("eval at step %d (policy): %w", step, err)
	}
	raw, err := l.evalSystem(ctx, turns, rawRewrites, rawRecs, both)
	if err != nil {
		return fmt.Errorf("eval at step %d (raw): %w", step, err)
	}
	m := EvalMetrics{Kind: "eval", Step: step, Phase: phase, Turns: len(turns), Compared: compared, Policy: pol, Raw: raw}
	if compared < len(turns) {
		l.log.Warn("eval: turns failed; both systems are averaged over the turns both completed",
			"step", step, "turns", len(turns), "compared", compared, "policy_failed", pol.Failed, "raw_failed", raw.Failed)
	}
	if err := l.metrics.Write(m); err != nil {
		return err
	}
	// Shown by the progress display (a line above the bar on a terminal, a
	// log line otherwise), or logged here when there is none.
	if p := l.deps.Progress; p != nil {
		p.Eval(m)
	} else {
		LogEval(l.log, m)
	}
	if phase != "init" {
		l.state.EvalDone = true
	}
	return nil
}

// LogEval writes an evaluation as one structured log line.
func LogEval(log *slog.Logger, m EvalMetrics) {
	log.Info("eval", "step", m.Step, "phase", m.Phase, "policy_reward", round4(m.Policy.Reward), "raw_reward", round4(m.Raw.Reward),
		"policy_recall@10", round4(m.Policy.Recall10), "raw_recall@10", round4(m.Raw.Recall10),
		"policy_mrr", round4(m.Policy.MRR), "raw_mrr", round4(m.Raw.MRR), "turns", m.Turns, "compared", m.Compared,
		"policy_failed", m.Policy.Failed, "raw_failed", m.Raw.Failed)
}

// evalRollouts runs one rewriter's rewrites through the rollout pipeline,
// one record per turn.
func (l *Loop) evalRollouts(ctx context.Context, step int, turns []datasets.Turn, rewrites []string, version int64) ([]rollout.Record, error) {
	groups := make([]rollout.Group, len(turns))
	for i, turn := range turns {
		groups[i] = rollout.Group{PromptID: "eval/" + turn.ID(), Turn: turn,
			Samples: []rollout.Sample{{Index: 0, Rewrite: rewrites[i], PolicyVersion: version}}}
	}
	recs, _, err := l.deps.Runner.Run(ctx, step, groups)
	if err != nil {
		return nil, err
	}
	if len(recs) != len(turns) {
		return nil, fmt.Errorf("%d rollout records for %d turns", len(recs), len(turns))
	}
	return recs, nil
}

// evalSystem averages one rewriter's reward terms over the turns in use
// (those both systems completed) and, where the turns have gold passages,
// computes the retrieval metrics over every judged turn (the ranking does
// not depend on the responder).
func (l *Loop) evalSystem(ctx context.Context, turns []datasets.Turn, rewrites []string, recs []rollout.Record, use []bool) (EvalSystem, error) {
	var s EvalSystem
	s.Turns = len(turns)
	valid := 0
	for i, r := range recs {
		if r.Failed() {
			s.Failed++
		}
		if !use[i] {
			continue
		}
		valid++
		s.Reward += r.Reward
		s.RougeLF1 += r.RougeF1
		s.EM += r.EM
		s.Hit += r.Hit
		s.SquadF1 += r.SquadF1
	}
	s.Compared = valid
	if valid > 0 {
		n := float64(valid)
		s.Reward, s.RougeLF1, s.EM, s.Hit, s.SquadF1 = s.Reward/n, s.RougeLF1/n, s.EM/n, s.Hit/n, s.SquadF1/n
	}
	if l.deps.Ranker == nil {
		return s, nil
	}
	judged := 0
	for i, turn := range turns {
		qrels := qrelsOf(turn)
		if len(qrels) == 0 {
			continue
		}
		run, err := l.deps.Ranker(ctx, turn.User, rewrites[i], turn.Question)
		if err != nil {
			return s, fmt.Errorf("rank %s: %w", turn.ID(), err)
		}
		judged++
		s.Recall10 += retrieval.Recall(run, qrels, 10)
		s.MRR += retrieval.RecipRank(run, qrels)
	}
	if judged > 0 {
		s.Recall10 /= float64(judged)
		s.MRR /= float64(judged)
	}
	return s, nil
}

// qrelsOf turns a turn's grounding passages into relevance judgments
// (unknown relevance counts as relevant).
func qrelsOf(turn datasets.Turn) map[string]int {
	q := map[string]int{}
	for _, p := range turn.Passages {
		rel := 1
		if p.Relevance != nil {
			rel = *p.Relevance
		}
		q[p.ID] = rel
	}
	return q
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }
