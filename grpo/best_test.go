package grpo

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// versionPolicy is a fakePolicy whose greedy rewrite names the policy
// version ("… v3"), so a ranker can play back a fixed eval sequence.
type versionPolicy struct{ *fakePolicy }

func (p versionPolicy) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	resp, err := p.fakePolicy.Sample(ctx, req)
	if req.Temperature == 0 {
		for i := range resp.Samples {
			resp.Samples[i].Text += " v" + strconv.FormatInt(resp.Samples[i].PolicyVersion, 10)
		}
	}
	return resp, err
}

// newBestLoop wires a loop whose held-out Recall@10 at policy version v is
// hits[v]/2: of the two eval turns, the first hits[v] rank their gold passage.
func newBestLoop(t *testing.T, cfg Config, pol *fakePolicy, run *rundir.RunDir, hits []int) *Loop {
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
	eval := testTurns(2)
	for i := range eval {
		eval[i].Passages = []datasets.PassageRef{{ID: "gold-" + eval[i].User}}
	}
	ranker := func(_ context.Context, user, rewrite, _ string) ([]retrieval.Scored, error) {
		_, v, ok := strings.Cut(rewrite, " v")
		if !ok {
			return nil, nil // the raw question
		}
		ver, err := strconv.Atoi(v)
		if err != nil {
			return nil, err
		}
		turn, _ := strconv.Atoi(strings.TrimPrefix(user, "c"))
		if turn < hits[ver] {
			return []retrieval.Scored{{ID: "gold-" + user, Score: 1}}, nil
		}
		return []retrieval.Scored{{ID: "other", Score: 1}}, nil
	}
	l, err := NewLoop(cfg, Deps{Policy: versionPolicy{pol}, Runner: runner, Renderer: rend, Train: testTurns(4),
		Eval: eval, Ranker: ranker, Reward: hser.DefaultConfig(), Run: run, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func bestConfig(steps, checkpointEvery, keep int) Config {
	cfg := testConfig()
	cfg.Steps, cfg.EvalEvery, cfg.CheckpointEvery, cfg.KeepCheckpoints = steps, 1, checkpointEvery, keep
	cfg.BestMetric = "eval.policy.recall_10"
	return cfg
}

// The quickstart's problem: the best evaluation (step 2 here) is older than
// the last K checkpoints. It is checkpointed even though checkpoint_every
// would not save it, survives the rotation on both sides, and "best" loads it.
func TestBestCheckpointSurvivesRetention(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	// Recall@10 by version (= step): 0, .5, 1, .5, .5, 0, .5.
	l := newBestLoop(t, bestConfig(6, 0, 2), pol, run, []int{0, 1, 2, 1, 1, 0, 1})
	if err := l.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ck := func(step int) string { return l.trainerCheckpointName(step) }
	// Checkpoints: step 0 (start), 1 and 2 (new bests), 6 (the end); the
	// rotation keeps 2 and 6 and releases 0 and 1 on the trainer.
	if want := fmt.Sprint([]string{ck(0), ck(1)}); fmt.Sprint(pol.deleted) != want {
		t.Fatalf("trainer deleted %v, want %s", pol.deleted, want)
	}
	if len(pol.saved) != 2 || pol.saved[ck(2)] != 2 || pol.saved[ck(6)] != 6 {
		t.Fatalf("trainer keeps %v, want step-000002 (v2) and step-000006 (v6)", pol.saved)
	}
	if steps, _ := run.StateSteps(); fmt.Sprint(steps) != "[2 6]" {
		t.Fatalf("harness keeps %v", steps)
	}
	best, err := LoadCheckpointState(run, "best")
	if err != nil {
		t.Fatal(err)
	}
	if best.Step != 2 || best.PolicyVersion != 2 || best.TrainerCheckpoint != ck(2) ||
		best.Best == nil || best.Best.Value != 1 || best.Best.Mode != "max" {
		t.Fatalf("best state %+v (best %+v)", best, best.Best)
	}
	latest, err := LoadCheckpointState(run, "latest")
	if err != nil || latest.Step != 6 || latest.TrainerCheckpoint != ck(6) || latest.Best.Step != 2 {
		t.Fatalf("latest state %+v, %v", latest, err)
	}
	// What "best" names is the policy that scored Recall@10 = 1.
	if _, err := pol.Load(context.Background(), trainer.LoadRequest{StepID: "x", Name: best.TrainerCheckpoint}); err != nil {
		t.Fatal(err)
	}
	if pol.version != 2 {
		t.Fatalf("best loads version %d, want 2", pol.version)
	}
}

// A best the rotation has outlived is released once a later evaluation
// beats it, and never before.
func TestSupersededBestIsReleased(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	// Best at step 1 (.5), superseded at step 4 (1).
	l := newBestLoop(t, bestConfig(6, 1, 1), pol, run, []int{0, 1, 0, 0, 2, 0, 0})
	if err := l.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	ck := func(step int) string { return l.trainerCheckpointName(step) }
	// step-000001 outlives its harness state (pruned at step 2) until step 4.
	if want := fmt.Sprint([]string{ck(0), ck(2), ck(3), ck(1), ck(5)}); fmt.Sprint(pol.deleted) != want {
		t.Fatalf("trainer deleted %v, want %s", pol.deleted, want)
	}
	if len(pol.saved) != 2 || pol.saved[ck(4)] != 4 || pol.saved[ck(6)] != 6 {
		t.Fatalf("trainer keeps %v", pol.saved)
	}
	best, err := LoadCheckpointState(run, "best")
	if err != nil || best.Step != 4 || best.TrainerCheckpoint != ck(4) {
		t.Fatalf("best %+v, %v", best, err)
	}
}

func TestBestMetricDirection(t *testing.T) {
	l := &Loop{cfg: Config{BestMetric: "eval.policy.failed", BestMode: "auto"}}
	at := func(step, failed int) *EvalMetrics {
		return &EvalMetrics{Step: step, Policy: EvalSystem{Failed: failed}}
	}
	b := l.newBest(at(0, 3))
	if b == nil || b.Mode != "min" || b.Value != 3 {
		t.Fatalf("first evaluation: %+v", b)
	}
	l.state.Best = b
	if l.newBest(at(1, 3)) != nil || l.newBest(at(1, 4)) != nil {
		t.Fatal("a tie or more failures must keep the earlier best")
	}
	if b := l.newBest(at(2, 1)); b == nil || b.Step != 2 {
		t.Fatalf("fewer failures: %+v", b)
	}
	l.cfg.BestMode = "max" // explicit direction overrides auto
	if b := l.newBest(at(3, 4)); b == nil || b.Mode != "max" {
		t.Fatalf("explicit max: %+v", b)
	}
	for _, bad := range []Config{{BestMetric: "eval.raw.reward", BestMode: "auto"}, {BestMetric: "eval.policy.turns", BestMode: "auto"},
		{BestMetric: "eval.policy.reward", BestMode: "up"}} {
		c := DefaultConfig()
		c.BestMetric, c.BestMode = bad.BestMetric, bad.BestMode
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "best_") {
			t.Errorf("%+v: want a best_metric/best_mode error, got %v", bad, err)
		}
	}
}

func TestRetrievalBestMetricNeedsJudgedTurns(t *testing.T) {
	for _, field := range []string{"recall_10", "mrr", "ndcg_cut_3"} {
		run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
		cfg := bestConfig(2, 1, 1)
		cfg.BestMetric = "eval.policy." + field
		scorer, _ := hser.NewScorer(hser.DefaultConfig())
		runner, _ := rollout.NewRunner(rollout.DefaultConfig(), echoRetriever{}, lastWordResponder{}, scorer)
		rend, _ := datasets.NewRenderer(datasets.DefaultPromptConfig())
		_, err := NewLoop(cfg, Deps{Policy: newFakePolicy(""), Runner: runner, Renderer: rend, Train: testTurns(4),
			Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run})
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Fatalf("%s: want an error naming it (no judged turns, no ranker), got %v", field, err)
		}
	}
}

// policyValue reads each retrieval field from its own metric: a best
// checkpoint chosen on ndcg_cut_3 is not one chosen on recall_10.
func TestPolicyValueRetrievalFields(t *testing.T) {
	r, m, n := 0.25, 0.5, 0.75
	e := EvalMetrics{Policy: EvalSystem{Recall10: &r, MRR: &m, NDCG3: &n}}
	for field, want := range map[string]float64{"recall_10": r, "mrr": m, "ndcg_cut_3": n} {
		if got, ok := policyValue(e, field); !ok || got != want {
			t.Errorf("%s: got %v (%v), want %v", field, got, ok, want)
		}
	}
	if _, ok := policyValue(EvalMetrics{}, "ndcg_cut_3"); ok {
		t.Error("ndcg_cut_3 not computed must not be a value")
	}
}
