package grpo

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// flakyResponder is lastWordResponder that also fails the calls failOn
// picks (by 0-based call number), and every call while down is set.
type flakyResponder struct {
	calls  atomic.Int64
	down   atomic.Bool
	failOn func(call int64) bool
}

func (*flakyResponder) Name() string { return "flaky" }

func (f *flakyResponder) Respond(ctx context.Context, q string, chunks []retrieval.Ranked) (string, error) {
	n := f.calls.Add(1) - 1
	if f.down.Load() || (f.failOn != nil && f.failOn(n)) {
		return "", &rollout.CallError{Kind: rollout.KindUnavailable, Host: "h", Status: 503, Attempts: 1, Err: errors.New("down")}
	}
	return lastWordResponder{}.Respond(ctx, q, chunks)
}

// newFlakyLoop is newTestLoop with the responder given, one rollout at a
// time (so call numbers are deterministic) and no answer cache.
func newFlakyLoop(t *testing.T, cfg Config, pol *fakePolicy, run *rundir.RunDir, resp rollout.Responder, eval []datasets.Turn) *Loop {
	t.Helper()
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	rcfg.Concurrency, rcfg.CacheSize = 1, 0
	runner, err := rollout.NewRunner(rcfg, echoRetriever{}, resp, scorer)
	if err != nil {
		t.Fatal(err)
	}
	rend, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLoop(cfg, Deps{Policy: pol, Runner: runner, Renderer: rend, Train: testTurns(4),
		Eval: eval, Reward: hser.DefaultConfig(), Run: run, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func readMetricLines(t *testing.T, run *rundir.RunDir) []map[string]any {
	t.Helper()
	f, err := os.Open(run.File("metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// Two identical rewriters (the untrained policy's greedy rewrite is the
// question) must score identically even when the responder fails different
// turns for each: both are averaged over the turns both completed.
func TestEvalComparesTurnsBothCompleted(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	// The answer is the rewrite's last word: "paris" has Rouge-L F1 2/3
	// against "paris france", "it" 0; either way Hit is 1 (the answer is in
	// the chunk, which is the rewrite) and EM 0.
	eval := testTurns(4)
	eval[0].Question, eval[1].Question, eval[2].Question, eval[3].Question = "q paris", "q it", "q paris", "q it"
	// One rollout at a time: calls 0–3 are the policy's turns, 4–7 the raw
	// question's. The policy fails turn 0, the raw question turn 1.
	resp := &flakyResponder{failOn: func(n int64) bool { return n == 0 || n == 5 }}
	cfg := testConfig()
	cfg.Steps = 0
	l := newFlakyLoop(t, cfg, newFakePolicy(""), run, resp, eval)
	startMetrics(t, l)
	if _, err := l.evaluate(context.Background(), 0, "init"); err != nil {
		t.Fatal(err)
	}
	lines := readMetricLines(t, run)
	if len(lines) != 1 {
		t.Fatalf("%d metric lines", len(lines))
	}
	var m EvalMetrics
	b, _ := json.Marshal(lines[0])
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	// Turns 2 and 3 are the ones both completed: F1 (2/3 + 0)/2, Hit (1+1)/2.
	wantF1 := (2.0 / 3) / 2
	for name, s := range map[string]EvalSystem{"policy": m.Policy, "raw": m.Raw} {
		if math.Abs(s.RougeLF1-wantF1) > 1e-12 || s.Failed != 1 || s.Turns != 4 || s.Compared != 2 {
			t.Errorf("%s: %+v, want rougeL_f1 %v over 2 compared turns, 1 failed of 4", name, s, wantF1)
		}
	}
	if m.Policy.Reward != m.Raw.Reward {
		t.Errorf("identical rewriters scored %v and %v", m.Policy.Reward, m.Raw.Reward)
	}
	if m.Turns != 4 || m.Compared != 2 || lines[0]["n_turns"] != 4.0 || lines[0]["n_compared"] != 2.0 {
		t.Errorf("counts: %+v / %v", m, lines[0])
	}
}

// A step whose rollouts mostly fail stops the run with a clear error instead
// of training on the rest; the last completed step is checkpointed, the
// failed one is not, and --resume redoes it to the same end as a run that
// never failed.
func TestRunStopsWhenRolloutsFailAndResumes(t *testing.T) {
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery = 3, 0 // only the stop writes the step-1 checkpoint

	// Reference: the same run with a responder that never fails.
	refRun, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	refPol := newFakePolicy(" paris", "")
	if err := newFlakyLoop(t, cfg, refPol, refRun, &flakyResponder{}, testTurns(2)).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}

	base, run, pol := freshRun(t)
	resp := &flakyResponder{}
	pol.onGRPO = func(trainer.GRPORequest) error {
		resp.down.Store(true) // the responder dies after step 1's rollouts
		return nil
	}
	err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(context.Background(), false)
	if !errors.Is(err, rollout.ErrTooManyFailed) {
		t.Fatalf("want a too-many-failed error, got %v", err)
	}
	for _, w := range []string{"step 2:", "8 of 8 rollouts failed", "max_failed_fraction 0.5", "--resume"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if pol.version != 1 {
		t.Errorf("policy version %d after the stop: step 2 must not update", pol.version)
	}
	if got := stepLedgers(t, run.Path); len(got[1]) != 8 || len(got[2]) != 0 {
		t.Errorf("ledger holds %d records of step 1 and %d of the failed step 2, want 8 and 0", len(got[1]), len(got[2]))
	}
	if _, step, err := rundir.LoadState(run, math.MaxInt, validState); err != nil || step != 1 {
		t.Fatalf("latest checkpoint step %d (%v), want the last completed step 1", step, err)
	}

	// The responder is back: --resume redoes step 2 and finishes.
	resp.down.Store(false)
	pol.onGRPO = nil
	run.Close()
	run, _ = rundir.Open(base, "r", rundir.Resume)
	if err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if pol.version != refPol.version || pol.version != 3 {
		t.Errorf("policy version %d, uninterrupted run %d", pol.version, refPol.version)
	}
	got, want := stepRewards(t, run), stepRewards(t, refRun)
	if len(got) != 3 || strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("resumed metrics %v, uninterrupted %v", got, want)
	}
}

// An evaluation whose turns mostly fail stops the run too; the step it
// follows is checkpointed, and --resume runs the evaluation it owes first.
func TestEvalFailureStopsAndResumeRedoesEval(t *testing.T) {
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.EvalEvery = 2, 0, 0
	base, run, pol := freshRun(t)
	resp := &flakyResponder{}
	updates := 0
	pol.onGRPO = func(trainer.GRPORequest) error {
		if updates++; updates == 2 {
			resp.down.Store(true) // down for the final evaluation
		}
		return nil
	}
	err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(context.Background(), false)
	if !errors.Is(err, rollout.ErrTooManyFailed) || !strings.Contains(err.Error(), "eval at step 2 (policy): 2 of 2 rollouts failed") {
		t.Fatalf("got %v", err)
	}
	if st, step, err := rundir.LoadState(run, math.MaxInt, validState); err != nil || step != 2 || st.EvalDone {
		t.Fatalf("checkpoint step %d eval_done %v (%v), want step 2 without its evaluation", step, st.EvalDone, err)
	}
	resp.down.Store(false)
	pol.onGRPO = nil
	run.Close()
	run, _ = rundir.Open(base, "r", rundir.Resume)
	if err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	var evals []float64
	for _, m := range readMetricLines(t, run) {
		if m["kind"] == "eval" {
			evals = append(evals, m["step"].(float64))
		}
	}
	if len(evals) != 2 || evals[0] != 0 || evals[1] != 2 || pol.version != 2 {
		t.Errorf("eval lines at steps %v (want [0 2]), policy version %d", evals, pol.version)
	}
}

// stepRewards lists each step line's step and reward, for comparing runs.
func stepRewards(t *testing.T, run *rundir.RunDir) []string {
	var out []string
	for _, m := range readMetricLines(t, run) {
		if m["kind"] == "step" {
			b, _ := json.Marshal([]any{m["step"], m["reward_mean"], m["policy_version"], m["failed_rollouts"]})
			out = append(out, string(b))
		}
	}
	return out
}

// SIGINT during an evaluation checkpoints the step without it; the
// evaluation used to be lost on --resume (the loop went on to the next step).
func TestInterruptedEvalIsRedoneOnResume(t *testing.T) {
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.EvalEvery = 2, 0, 1
	base, run, pol := freshRun(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	resp := &flakyResponder{}
	updates := 0
	pol.onGRPO = func(trainer.GRPORequest) error {
		if updates++; updates == 1 {
			// Step 1's evaluation is the next thing to call the responder.
			resp.failOn = func(int64) bool { cancel(); return true }
		}
		return nil
	}
	if err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(ctx, false); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want an interruption", err)
	}
	if st, step, err := rundir.LoadState(run, math.MaxInt, validState); err != nil || step != 1 || st.EvalDone {
		t.Fatalf("checkpoint step %d eval_done %v (%v), want step 1 without its evaluation", step, st.EvalDone, err)
	}
	resp.failOn, pol.onGRPO = nil, nil
	run.Close()
	run, _ = rundir.Open(base, "r", rundir.Resume)
	if err := newFlakyLoop(t, cfg, pol, run, resp, testTurns(2)).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	var evals []float64
	for _, m := range readMetricLines(t, run) {
		if m["kind"] == "eval" {
			evals = append(evals, m["step"].(float64))
		}
	}
	if len(evals) != 3 || evals[0] != 0 || evals[1] != 1 || evals[2] != 2 {
		t.Errorf("eval lines at steps %v, want [0 1 2]", evals)
	}
}

// A failed ledger write said "write ledger: write ledger: ...".
func TestLedgerWriteErrorSaysItOnce(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	ledger := run.File("ledger")
	if err := os.RemoveAll(ledger); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(ledger, []byte("not a directory"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.LedgerSteps = 1 // the step writes its file
	l := newTestLoop(t, cfg, newFakePolicy(" paris", ""), run)
	startMetrics(t, l)
	_, err := l.Step(context.Background(), 1)
	if err == nil || strings.Count(err.Error(), "write ledger") != 1 {
		t.Fatalf("got %v, want one \"write ledger\"", err)
	}
}
