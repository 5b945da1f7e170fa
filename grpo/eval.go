package grpo

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// evalSeed is fixed so that every evaluation of a run samples the same way;
// greedy decoding makes it irrelevant for most endpoints anyway.
const evalSeed = 20260

// evaluate scores the policy's greedy rewrites on the held-out turns, and
// the raw question as a fixed baseline, and appends an "eval" line. It
// returns nil metrics when there are no held-out turns.
func (l *Loop) evaluate(ctx context.Context, step int, phase string) (*EvalMetrics, error) {
	turns := l.deps.Eval
	if l.cfg.EvalTurns > 0 && len(turns) > l.cfg.EvalTurns {
		turns = turns[:l.cfg.EvalTurns]
	}
	if len(turns) == 0 {
		if phase != "init" {
			l.state.EvalDone = true
		}
		return nil, nil
	}
	prompts, err := l.render(ctx, turns)
	if err != nil {
		return nil, err
	}
	// Greedy samples do not depend on the batch, so calls of at most the
	// trainer's max_prompts give the same rewrites as one call.
	chunk := len(prompts)
	if l.limits.MaxPrompts > 0 {
		chunk = l.limits.MaxPrompts
	}
	resp := trainer.SampleResponse{PolicyVersion: l.state.PolicyVersion}
	for lo := 0; lo < len(prompts); lo += chunk {
		part, err := l.deps.Policy.Sample(ctx, trainer.SampleRequest{
			Prompts: prompts[lo:min(lo+chunk, len(prompts))], N: 1, Temperature: 0, TopP: 1, MaxTokens: l.cfg.MaxTokens, Seed: evalSeed,
			ExpectedPolicyVersion: l.expected(),
		})
		if err != nil {
			return nil, fmt.Errorf("eval at step %d: sample: %w", step, err)
		}
		if err := l.checkSampled(part); err != nil {
			return nil, fmt.Errorf("eval at step %d: %w", step, err)
		}
		resp.Samples = append(resp.Samples, part.Samples...)
	}
	if len(resp.Samples) != len(turns) {
		return nil, fmt.Errorf("eval at step %d: trainer returned %d samples for %d prompts", step, len(resp.Samples), len(turns))
	}
	policyRewrites := make([]string, len(turns))
	rawRewrites := make([]string, len(turns))
	for i, s := range resp.Samples {
		policyRewrites[i] = s.Text
		rawRewrites[i] = turns[i].Question
	}
	polRecs, err := l.evalRollouts(ctx, step, turns, policyRewrites, resp.PolicyVersion)
	if err != nil {
		return nil, fmt.Errorf("eval at step %d (policy): %w", step, err)
	}
	rawRecs, err := l.evalRollouts(ctx, step, turns, rawRewrites, resp.PolicyVersion)
	if err != nil {
		return nil, fmt.Errorf("eval at step %d (raw): %w", step, err)
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
	if compared == 0 {
		// A row of zeros would read as a measurement.
		return nil, fmt.Errorf("eval at step %d: no turn completed for both the policy and the raw question (policy failed %d, raw failed %d of %d; first: %s)",
			step, countFailed(polRecs), countFailed(rawRecs), len(turns), firstError(polRecs, rawRecs))
	}
	pol, err := l.evalSystem(ctx, turns, policyRewrites, polRecs, both)
	if err != nil {
		return nil, fmt.Errorf("eval at step %d (policy): %w", step, err)
	}
	raw, err := l.evalSystem(ctx, turns, rawRewrites, rawRecs, both)
	if err != nil {
		return nil, fmt.Errorf("eval at step %d (raw): %w", step, err)
	}
	pol.AddsNothing = new(addsNothing(policyRewrites, rawRewrites))
	m := EvalMetrics{Kind: "eval", Step: step, Phase: phase, Turns: len(turns), Compared: compared, Policy: pol, Raw: raw}
	m.Collapse = l.addsNothingCollapse(m)
	m.ConstantTerms = l.noteConstantTerms(fmt.Sprintf("eval at step %d", step), append(append([]rollout.Record(nil), polRecs...), rawRecs...))
	if compared < len(turns) {
		l.log.Warn("eval: turns failed; both systems are averaged over the turns both completed",
			"step", step, "turns", len(turns), "compared", compared, "policy_failed", pol.Failed, "raw_failed", raw.Failed)
	}
	if err := l.writeLine(&m); err != nil {
		return nil, err
	}
	if err := l.writeSamples(step, phase, turns, polRecs, rawRecs); err != nil {
		return nil, fmt.Errorf("eval at step %d: %w", step, err)
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
	return &m, nil
}

// LogEval writes an evaluation as one structured log line; metrics that were
// not computed are left out.
func LogEval(log *slog.Logger, m EvalMetrics) {
	attrs := []any{"step", m.Step, "phase", m.Phase, "policy_reward", round4(m.Policy.Reward), "raw_reward", round4(m.Raw.Reward)}
	for _, o := range []struct {
		key string
		v   *float64
	}{{"policy_recall@10", m.Policy.Recall10}, {"raw_recall@10", m.Raw.Recall10}, {"policy_mrr", m.Policy.MRR}, {"raw_mrr", m.Raw.MRR},
		{"policy_ndcg@3", m.Policy.NDCG3}, {"raw_ndcg@3", m.Raw.NDCG3}} {
		if o.v != nil {
			attrs = append(attrs, o.key, round4(*o.v))
		}
	}
	log.Info("eval", append(attrs, "turns", m.Turns, "compared", m.Compared,
		"policy_failed", m.Policy.Failed, "raw_failed", m.Raw.Failed)...)
}

func countFailed(recs []rollout.Record) int {
	n := 0
	for _, r := range recs {
		if r.Failed() {
			n++
		}
	}
	return n
}

func firstError(sets ...[]rollout.Record) string {
	for _, recs := range sets {
		for _, r := range recs {
			if r.Failed() {
				return r.Error
			}
		}
	}
	return ""
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
// not depend on the responder). Means come with 95% intervals from
// resampling conversations: himes eval's evaluator (evaluate.Conversations,
// ScoreRanking, Estimate) with its default resampling and the run's seed,
// so himes eval on the run's checkpoint reproduces them. The means are
// summed turn by turn; Estimate's sum conversation by conversation, so the
// two can differ in the last bits of a float64 and in nothing else.
func (l *Loop) evalSystem(ctx context.Context, turns []datasets.Turn, rewrites []string, recs []rollout.Record, use []bool) (EvalSystem, error) {
	s := EvalSystem{Turns: len(turns)}
	reward, squad := make([]float64, len(turns)), make([]float64, len(turns))
	valid := 0
	for i, r := range recs {
		if r.Failed() {
			s.Failed++
		}
		if !use[i] {
			reward[i], squad[i] = math.NaN(), math.NaN()
			continue
		}
		valid++
		reward[i], squad[i] = r.Reward, r.SquadF1
		s.Reward += r.Reward
		s.RougeLF1 += r.RougeF1
		s.EM += r.EM
		s.Hit += r.Hit
		s.SquadEM += r.SquadEM
		s.SquadF1 += r.SquadF1
	}
	s.Compared = valid
	convs := evaluate.Conversations(turns)
	cfg := evaluate.DefaultStats(l.deps.Seed)
	if valid > 0 {
		n := float64(valid)
		s.Reward, s.RougeLF1, s.EM, s.Hit, s.SquadF1 = s.Reward/n, s.RougeLF1/n, s.EM/n, s.Hit/n, s.SquadF1/n
		s.SquadEM /= n
		var err error
		if s.CI.Reward, err = interval(convs, reward, cfg); err != nil {
			return s, err
		}
		if s.CI.SquadF1, err = interval(convs, squad, cfg); err != nil {
			return s, err
		}
	}
	if l.deps.Ranker == nil {
		return s, nil
	}
	recall, rr, ndcg := make([]float64, len(turns)), make([]float64, len(turns)), make([]float64, len(turns))
	judged := 0
	var sumR, sumRR, sumN float64
	for i, turn := range turns {
		recall[i], rr[i], ndcg[i] = math.NaN(), math.NaN(), math.NaN()
		qrels := turn.Qrels()
		if len(qrels) == 0 {
			continue
		}
		run, err := l.deps.Ranker(ctx, turn.User, rewrites[i], turn.Question)
		if err != nil {
			return s, fmt.Errorf("rank %s: %w", turn.ID(), err)
		}
		judged++
		sc := evaluate.ScoreRanking(run, qrels)
		recall[i], rr[i], ndcg[i] = sc.Recall10, sc.RecipRank, sc.NDCG3
		sumR += recall[i]
		sumRR += rr[i]
		sumN += ndcg[i]
	}
	if judged > 0 {
		s.Recall10, s.MRR, s.NDCG3 = ptr(sumR/float64(judged)), ptr(sumRR/float64(judged)), ptr(sumN/float64(judged))
		var err error
		if s.CI.Recall10, err = interval(convs, recall, cfg); err != nil {
			return s, err
		}
		if s.CI.MRR, err = interval(convs, rr, cfg); err != nil {
			return s, err
		}
		if s.CI.NDCG3, err = interval(convs, ndcg, cfg); err != nil {
			return s, err
		}
	}
	return s, nil
}

// interval is the 95% interval of evaluate.Estimate, nil when no turn has a
// value.
func interval(convs [][]int, perTurn []float64, cfg stats.Config) (*Interval, error) {
	est, err := evaluate.Estimate(convs, perTurn, cfg)
	if errors.Is(err, stats.ErrNoData) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return &Interval{Lo: est.Lo, Hi: est.Hi}, nil
}

func round4(x float64) float64 { return math.Round(x*1e4) / 1e4 }
