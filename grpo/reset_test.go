package grpo

import (
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// resetPolicy is fakePolicy with SFT and, when reset, capabilities.optimizer_reset.
type resetPolicy struct {
	*fakePolicy
	reset bool
}

func (s *resetPolicy) Info(ctx context.Context) (trainer.Info, error) {
	info, err := s.fakePolicy.Info(ctx)
	info.Capabilities.OptimizerReset = s.reset
	return info, err
}

func (s *resetPolicy) SFTStep(_ context.Context, req trainer.SFTRequest) (trainer.SFTResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.appliedStep[req.StepID] {
		s.appliedStep[req.StepID] = true
		s.version++
	}
	return trainer.SFTResponse{PolicyVersion: s.version}, nil
}

func sftLoop(t *testing.T, cfg Config, pol trainer.Policy, run *rundir.RunDir) *Loop {
	t.Helper()
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	runner, err := rollout.NewRunner(rollout.DefaultConfig(), echoRetriever{}, lastWordResponder{}, scorer)
	if err != nil {
		t.Fatal(err)
	}
	rend, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	sft := testTurns(3)
	for i := range sft {
		sft[i].Rewrite = new("where is paris")
	}
	l, err := NewLoop(cfg, Deps{Policy: pol, Runner: runner, Renderer: rend, Train: testTurns(4), SFT: sft,
		Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// resets lists, per grpo_step call, whether it carried reset_optimizer.
func resets(p *fakePolicy) []bool {
	var out []bool
	for _, c := range p.grpoCalls {
		out = append(out, c.ResetOptimizer)
	}
	return out
}

// TestOptimizerResetOnFirstStepAfterSFT: with SFT the first grpo_step resets
// the optimizer and no later one does, also not after a resume past it;
// grpo.optimizer.reset: false never resets; an endpoint without the
// capability is refused before training, naming the key.
func TestOptimizerResetOnFirstStepAfterSFT(t *testing.T) {
	cfg := testConfig()
	cfg.SFT = SFTConfig{Epochs: 1, BatchSize: 2, LearningRate: 0.1}
	base, run, fake := freshRun(t)
	pol := &resetPolicy{fakePolicy: fake, reset: true}
	if err := sftLoop(t, cfg, pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if got := resets(fake); len(got) != 2 || !got[0] || got[1] {
		t.Fatalf("reset_optimizer per step %v, want [true false]", got)
	}
	cfg.Steps = 3
	run, err := rundir.Open(base, "r", rundir.Resume)
	if err != nil {
		t.Fatal(err)
	}
	if err := sftLoop(t, cfg, pol, run).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if got := resets(fake); len(got) != 3 || got[2] {
		t.Fatalf("reset_optimizer per step after the resume %v, want [true false false]", got)
	}

	cfg.Steps = 2
	cfg.Optimizer.Reset = false
	_, run, fake = freshRun(t)
	if err := sftLoop(t, cfg, &resetPolicy{fakePolicy: fake, reset: true}, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if got := resets(fake); len(got) != 2 || got[0] || got[1] {
		t.Errorf("grpo.optimizer.reset false: reset_optimizer per step %v, want none", got)
	}

	cfg.Optimizer.Reset = true
	_, run, fake = freshRun(t)
	defer run.Close()
	err = sftLoop(t, cfg, &resetPolicy{fakePolicy: fake}, run).Run(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), "grpo.optimizer.reset") {
		t.Errorf("an endpoint without optimizer_reset: %v, want a refusal naming grpo.optimizer.reset", err)
	}
	if len(fake.grpoCalls) != 0 {
		t.Errorf("%d grpo_steps sent before the refusal", len(fake.grpoCalls))
	}
}

// An SFT phase with no human rewrite to imitate is refused before any
// trainer call, naming the key: before, its epochs ran on no examples and
// logged "loss=0" for a loss never computed.
func TestSFTWithoutRewritesIsRefused(t *testing.T) {
	cfg := testConfig()
	cfg.SFT = SFTConfig{Epochs: 2, BatchSize: 2, LearningRate: 0.1}
	_, run, fake := freshRun(t)
	defer run.Close()
	rend, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	sft := testTurns(3)
	for i := range sft {
		sft[i].Rewrite = new("  ") // blank counts as none
	}
	_, err = NewLoop(cfg, Deps{Policy: &resetPolicy{fakePolicy: fake, reset: true}, Runner: &rollout.Runner{}, Renderer: rend,
		Train: testTurns(4), SFT: sft, Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run, Seed: 3})
	if err == nil || !strings.Contains(err.Error(), "grpo.sft.epochs 2: none of the 3 SFT turns") {
		t.Fatalf("SFT turns without rewrites: %v, want a refusal naming grpo.sft.epochs", err)
	}
	// One rewrite is enough; no SFT epochs need none.
	sft[1].Rewrite = new("where is paris")
	if _, err := NewLoop(cfg, Deps{Policy: fake, Runner: &rollout.Runner{}, Renderer: rend, Train: testTurns(4), SFT: sft,
		Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run, Seed: 3}); err != nil {
		t.Errorf("one SFT turn with a rewrite: %v", err)
	}
	cfg.SFT.Epochs = 0
	if _, err := NewLoop(cfg, Deps{Policy: fake, Runner: &rollout.Runner{}, Renderer: rend, Train: testTurns(4), SFT: testTurns(3),
		Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run, Seed: 3}); err != nil {
		t.Errorf("no SFT epochs: %v", err)
	}
}

// A run that trains nothing (no GRPO steps, no SFT) still finishes with a
// "best" checkpoint; its log and status.json say that its policy is the
// starting one. A run that trains says nothing of the kind.
func TestRunThatTrainsNothingSaysSo(t *testing.T) {
	const msg = "nothing is trained"
	for _, steps := range []int{0, 1} {
		cfg := testConfig()
		cfg.Steps = steps
		_, run, pol := freshRun(t)
		if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		run.Close()
		st, ok, err := ReadStatus(run.Path)
		if err != nil || !ok {
			t.Fatalf("status: %v %v", ok, err)
		}
		said := slices.ContainsFunc(st.Warnings, func(w string) bool { return strings.HasPrefix(w, msg) })
		if said != (steps == 0) {
			t.Errorf("grpo.steps %d: status warnings %q; want %q said: %v", steps, st.Warnings, msg, steps == 0)
		}
	}
}

// grpo.temperature 0 samples the greedy rewrite group_size times: every
// group ties and the steps apply no update (a 10-step quickstart ran with
// zero_var=1 at every step and its weights all 0). It is refused when GRPO
// steps run, and allowed for an SFT-only run, which samples nothing.
func TestGreedyGRPOIsRefused(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Temperature, cfg.Steps = 0, 10
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "temperature: is 0 with 10 GRPO steps") {
		t.Errorf("temperature 0, 10 steps: got %v", err)
	}
	cfg.Steps = 0
	if err := cfg.Validate(); err != nil {
		t.Errorf("temperature 0, no steps: %v", err)
	}
	cfg.Temperature, cfg.Steps = 0.01, 10
	if err := cfg.Validate(); err != nil {
		t.Errorf("temperature 0.01: %v", err)
	}
}
