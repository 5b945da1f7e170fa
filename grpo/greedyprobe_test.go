package grpo

import (
	"context"
	"math"
	"strings"
	"testing"
)

// firstStep runs step 1 of a fresh run under cfg with the fake policy that
// samples " paris" and "" in turn.
func firstStep(t *testing.T, cfg Config) (StepMetrics, *fakePolicy) {
	t.Helper()
	_, run, pol := freshRun(t)
	t.Cleanup(func() { run.Close() })
	l := newTestLoop(t, cfg, pol, run)
	startMetrics(t, l)
	if err := l.restore(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	m, err := l.Step(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	return m, pol
}

// TestGreedyProbe: the fake policy's greedy rewrite is the question ("where
// is it", answered "it": Rouge-L 0 against "paris france", Hit 1, R = 1) and
// its samples alternate " paris" (answered "paris": Rouge-L F1 = 2·1·½/(1 +
// ½) = ⅔, Hit 1, R = 5/3) and "" (R = 1). So in every group of 4, 2 samples
// beat greedy (frac_beat_greedy ½), greedy is never best (0), and its mean
// reward is 1. The probe's rollouts are not trained on: the update still
// carries prompts × group_size samples.
func TestGreedyProbe(t *testing.T) {
	cfg := testConfig()
	cfg.GreedyProbe = true
	m, pol := firstStep(t, cfg)
	for name, c := range map[string]struct {
		got  *float64
		want float64
	}{"frac_beat_greedy": {m.FracBeatGreedy, 0.5}, "frac_greedy_best": {m.FracGreedyBest, 0}, "greedy_reward": {m.GreedyReward, 1}} {
		if c.got == nil || *c.got != c.want {
			t.Errorf("%s = %v, want %v", name, c.got, c.want)
		}
	}
	if n := len(pol.grpoCalls[0].Samples); n != cfg.PromptsPerStep*cfg.GroupSize {
		t.Errorf("the update carried %d samples, want %d: greedy rollouts must not be trained on", n, cfg.PromptsPerStep*cfg.GroupSize)
	}
	if m.Rollouts != cfg.PromptsPerStep*cfg.GroupSize {
		t.Errorf("rollouts %d, want %d (the probe's are not counted)", m.Rollouts, cfg.PromptsPerStep*cfg.GroupSize)
	}

	// Off (the default): absent.
	m2, _ := firstStep(t, testConfig())
	if m2.FracBeatGreedy != nil || m2.FracGreedyBest != nil || m2.GreedyReward != nil {
		t.Errorf("without grpo.greedy_probe the probe's metrics must be absent")
	}
}

// TestGreedyBaselineAdvantages: with advantage.estimator greedy (SCST /
// ReMax) each sample's advantage is its reward minus its group's greedy
// rollout's, rolled out without grpo.greedy_probe. With the fake policy of
// TestGreedyProbe the samples score 5/3 and 1 against a greedy 1, so the
// update carries 2/3 and exactly 0 (group normalization would send ±1), and
// the probe's metrics are logged.
func TestGreedyBaselineAdvantages(t *testing.T) {
	cfg := testConfig()
	cfg.Advantage.Estimator = "greedy"
	m, pol := firstStep(t, cfg)
	if m.GreedyReward == nil || *m.GreedyReward != 1 {
		t.Errorf("greedy_reward = %v, want 1 (the greedy rollouts ran)", m.GreedyReward)
	}
	samples := pol.grpoCalls[0].Samples
	if len(samples) != cfg.PromptsPerStep*cfg.GroupSize {
		t.Fatalf("the update carried %d samples, want %d", len(samples), cfg.PromptsPerStep*cfg.GroupSize)
	}
	for i, s := range samples {
		want := 0.0 // the fake's odd samples add "": the greedy rewrite itself
		if s.TokenIDs[0]%2 == 0 {
			want = 2.0 / 3 // " paris"
		}
		if math.Abs(s.Advantage-want) > 1e-12 {
			t.Errorf("sample %d (token %d): advantage %v, want %v", i, s.TokenIDs[0], s.Advantage, want)
		}
	}

	// Dynamic sampling draws tied groups again before the greedy rollout
	// exists: refused with the greedy estimator.
	cfg.DynamicSampling.MaxRounds = 2
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "dynamic_sampling.max_rounds") {
		t.Errorf("greedy estimator with dynamic sampling: %v", err)
	}
}
