package grpo

import (
	"context"
	"fmt"
	"time"

	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// greedyProbe measures how the step's samples compare with the greedy
// rewrite, the policy that evaluations (and users) get: one extra sample
// call at temperature 0 and one extra rollout per prompt, under the policy
// that sampled the step (before its update). The greedy rollouts are
// guarded like the others but are not trained on, not in the ledger and not
// in the step's rollout counts; their answers share the answer cache, so a
// run with the probe may count other cache hits than one without.
// It returns FracBeatGreedy (the share of valid sampled rollouts whose
// reward exceeds their group's greedy reward), FracGreedyBest (the share of
// groups whose greedy reward ties or beats every valid sample) and the mean
// greedy reward, over the groups whose greedy rollout did not fail; nil
// when every greedy rollout failed. It also sets b.greedy, each group's
// greedy rollout as the advantage code reads it (the baseline of the greedy
// estimator; Valid false where it failed).
func (l *Loop) greedyProbe(ctx context.Context, step int, b *stepBatch, timing *stageTimes) (beat, best, greedy *float64, err error) {
	prompts := make([]trainer.Prompt, len(b.groups))
	for i, g := range b.groups {
		prompts[i] = g.prompt
	}
	sampleStart := time.Now()
	resp, err := l.deps.Policy.Sample(ctx, trainer.SampleRequest{
		Prompts: prompts, N: 1, Temperature: 0, TopP: l.cfg.TopP, MaxTokens: l.cfg.MaxTokens,
		Seed: deriveSeed(l.deps.Seed, int64(step), -1), ExpectedPolicyVersion: l.expected(),
	})
	if err != nil {
		return nil, nil, nil, fmt.Errorf("greedy probe: sample: %w", err)
	}
	if len(resp.Samples) != len(prompts) {
		return nil, nil, nil, fmt.Errorf("greedy probe: sample: trainer returned %d samples, want %d", len(resp.Samples), len(prompts))
	}
	if err := l.checkSampled(resp); err != nil {
		return nil, nil, nil, err
	}
	timing.sample += time.Since(sampleStart)
	groups := make([]rollout.Group, len(b.groups))
	for i, g := range b.groups {
		s := resp.Samples[i]
		groups[i] = rollout.Group{PromptID: g.prompt.ID, Turn: g.turn,
			Samples: []rollout.Sample{{Index: 0, Rewrite: s.Text, PolicyVersion: s.PolicyVersion}}}
	}
	records, stats, err := l.deps.Runner.Run(ctx, step, groups)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("greedy probe: rollouts: %w", err)
	}
	timing.addRollouts(stats)

	var beats, valid, bestGroups, groupsSeen int
	var greedySum float64
	b.greedy = make([]rlcore.SampleReward, len(b.groups))
	for i, g := range b.groups {
		rec := records[i : i+1]
		applyGuards(l.registry(), l.cfg.Guards, l.guardTurn(g.turn), rec)
		b.greedy[i] = recordReward(rec[0])
		if rec[0].Failed() {
			continue
		}
		gr := rec[0].Reward
		groupsSeen++
		greedySum += gr
		isBest := true
		for _, r := range g.records {
			if r.Failed() {
				continue
			}
			valid++
			if r.Reward > gr {
				beats++
				isBest = false
			}
		}
		if isBest {
			bestGroups++
		}
	}
	if groupsSeen == 0 {
		return nil, nil, nil, nil
	}
	best, greedy = ptr(float64(bestGroups)/float64(groupsSeen)), ptr(greedySum/float64(groupsSeen))
	if valid > 0 {
		beat = ptr(float64(beats) / float64(valid))
	}
	return beat, best, greedy, nil
}

// greedyBaseline reports whether the advantage estimator compares each
// sample with its group's greedy rollout (rlcore.EstimatorGreedy): then
// every step rolls the greedy rewrites out, as grpo.greedy_probe does.
func (l *Loop) greedyBaseline() bool {
	est, err := l.registry().AdvantageEstimator(l.cfg.Advantage.Estimator)
	return err == nil && est.UsesGreedy
}
