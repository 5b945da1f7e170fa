package grpo

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// fakePolicy samples fixed rewrites: sample k of a prompt is the question
// followed by suffixes[k]. It records the calls the loop makes.
type fakePolicy struct {
	mu          sync.Mutex
	suffixes    []string
	version     int64
	saved       map[string]int64
	savedRun    map[string]string
	grpoCalls   []trainer.GRPORequest
	loads       []string
	deleted     []string
	onGRPO      func(trainer.GRPORequest) error
	appliedStep map[string]bool
	// noWeightDecay: an endpoint without capabilities.weight_decay.
	noWeightDecay bool
}

func newFakePolicy(suffixes ...string) *fakePolicy {
	return &fakePolicy{suffixes: suffixes, saved: map[string]int64{}, savedRun: map[string]string{}, appliedStep: map[string]bool{}}
}

func (f *fakePolicy) Info(context.Context) (trainer.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return trainer.Info{PolicyVersion: f.version, Capabilities: trainer.Capabilities{Delete: true, WeightDecay: !f.noWeightDecay}}, nil
}

func (f *fakePolicy) Delete(_ context.Context, req trainer.DeleteRequest) (trainer.DeleteResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.saved[req.Name]
	delete(f.saved, req.Name)
	f.deleted = append(f.deleted, req.Name)
	return trainer.DeleteResponse{Name: req.Name, Deleted: ok, PolicyVersion: f.version}, nil
}

func (f *fakePolicy) Sample(_ context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out trainer.SampleResponse
	for i, p := range req.Prompts {
		for k := 0; k < req.N; k++ {
			suffix := ""
			if req.Temperature > 0 {
				suffix = f.suffixes[k%len(f.suffixes)]
			}
			out.Samples = append(out.Samples, trainer.Sample{PromptIndex: i, SampleIndex: k,
				Text: p.Dialogue.Question + suffix, TokenIDs: []int{k}, Logprobs: []float64{-0.5}, PolicyVersion: f.version})
		}
	}
	out.PolicyVersion = f.version
	return out, nil
}

func (f *fakePolicy) SFTStep(context.Context, trainer.SFTRequest) (trainer.SFTResponse, error) {
	return trainer.SFTResponse{}, errors.New("not used")
}

func (f *fakePolicy) GRPOStep(_ context.Context, req trainer.GRPORequest) (trainer.GRPOResponse, error) {
	if f.onGRPO != nil {
		if err := f.onGRPO(req); err != nil {
			return trainer.GRPOResponse{}, err
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.grpoCalls = append(f.grpoCalls, req)
	if !f.appliedStep[req.StepID] {
		f.appliedStep[req.StepID] = true
		f.version++
	}
	return trainer.GRPOResponse{PolicyVersion: f.version}, nil
}

func (f *fakePolicy) Save(_ context.Context, req trainer.SaveRequest) (trainer.SaveResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.saved[req.Name] = f.version
	f.savedRun[req.Name] = req.RunID
	return trainer.SaveResponse{Name: req.Name, PolicyVersion: f.version}, nil
}

func (f *fakePolicy) Load(_ context.Context, req trainer.LoadRequest) (trainer.LoadResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	v, ok := f.saved[req.Name]
	if !ok {
		return trainer.LoadResponse{}, fmt.Errorf("no checkpoint %q", req.Name)
	}
	f.loads = append(f.loads, req.Name)
	f.version = v
	return trainer.LoadResponse{Name: req.Name, PolicyVersion: v, RunID: f.savedRun[req.Name]}, nil
}

func (f *fakePolicy) Checkpoints(context.Context) ([]trainer.CheckpointInfo, error) { return nil, nil }

// echoRetriever returns the rewrite itself as the only chunk.
type echoRetriever struct{}

func (echoRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	return retrieval.Result{Chunks: []retrieval.Ranked{{Chunk: retrieval.Chunk{ID: "c", PassageID: "p", Text: rewrite}, Score: 1}}}, nil
}

// lastWordResponder answers with the last word of the retrieved chunk, and
// fails for rewrites that contain FAIL.
type lastWordResponder struct{}

func (lastWordResponder) Name() string { return "last-word" }

func (lastWordResponder) Respond(_ context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	text := chunks[0].Text
	if strings.Contains(text, "FAIL") {
		return "", errors.New("responder exploded")
	}
	w := strings.Fields(text)
	return w[len(w)-1], nil
}

func testTurns(n int) []datasets.Turn {
	turns := make([]datasets.Turn, n)
	for i := range turns {
		turns[i] = datasets.Turn{ConvID: fmt.Sprintf("c%d", i), Turn: 2, Question: "where is it",
			History: []datasets.Message{{Role: "user", Text: "tell me about paris"}, {Role: "assistant", Text: "paris is in france"}},
			Answer:  "paris france", User: fmt.Sprintf("c%d", i)}
	}
	return turns
}

func newTestLoop(t *testing.T, cfg Config, pol *fakePolicy, run *rundir.RunDir) *Loop {
	t.Helper()
	scorer, err := hser.NewScorer(hser.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	rcfg := rollout.DefaultConfig()
	runner, err := rollout.NewRunner(rcfg, echoRetriever{}, lastWordResponder{}, scorer)
	if err != nil {
		t.Fatal(err)
	}
	rend, err := datasets.NewRenderer(datasets.DefaultPromptConfig())
	if err != nil {
		t.Fatal(err)
	}
	tr, err := NewLoop(cfg, Deps{Policy: pol, Runner: runner, Renderer: rend, Train: testTurns(4),
		Eval: testTurns(2), Reward: hser.DefaultConfig(), Run: run, Seed: 3})
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func testConfig() Config {
	cfg := DefaultConfig()
	cfg.Steps, cfg.PromptsPerStep, cfg.GroupSize = 2, 2, 4
	cfg.EvalEvery, cfg.CheckpointEvery = 0, 1
	// These tests follow the latest policy (resume, metrics lines); the
	// fake policies add nothing by design. collapse_test.go and
	// bestend_test.go turn both features on.
	cfg.LoadBestAtEnd = new(false)
	cfg.Collapse.AddsNothing, cfg.Collapse.EntropyFloor = 0, 0
	return cfg
}

func startMetrics(t *testing.T, tr *Loop) {
	t.Helper()
	m, err := openMetrics(tr.deps.Run.File("metrics.jsonl"), -1, false, tr.log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	tr.metrics = m
}

func TestStepExcludesFailedRolloutsAndLedgersThem(t *testing.T) {
	run, err := rundir.Open(t.TempDir(), "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	// Suffix " paris" answers "paris" (Rouge-L F1 2/3 against "paris france"),
	// "" answers "it" (F1 0), " FAIL" makes the responder fail.
	pol := newFakePolicy(" paris", "", " FAIL", "")
	var tr *Loop
	pol.onGRPO = func(req trainer.GRPORequest) error {
		// Only completed steps enter the ledger.
		if tr.ledger != nil && tr.ledger.Rows() != 0 {
			return fmt.Errorf("the ledger holds %d rows before the step's update", tr.ledger.Rows())
		}
		return nil
	}
	tr = newTestLoop(t, testConfig(), pol, run)
	startMetrics(t, tr)
	m, err := tr.Step(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.flushLedger(); err != nil {
		t.Fatal(err)
	}
	if recs := stepLedgers(t, run.Path)[1]; len(recs) != 8 {
		t.Fatalf("ledger of step 1 has %d records, want 8", len(recs))
	}
	if m.FailedRollouts != 2 || m.Rollouts != 8 {
		t.Fatalf("failed=%d rollouts=%d, want 2 of 8", m.FailedRollouts, m.Rollouts)
	}
	if len(pol.grpoCalls) != 1 {
		t.Fatalf("want one update, got %d", len(pol.grpoCalls))
	}
	req := pol.grpoCalls[0]
	if len(req.Samples) != 6 {
		t.Fatalf("update carries %d samples, want the 6 valid ones", len(req.Samples))
	}
	// Per group the valid rewards are {2/3, 0, 0} (the failed sample is not
	// in the baseline): group normalization with population std and ε 1e-6.
	r := []float64{2.0 / 3, 0, 0}
	mean := (r[0] + r[1] + r[2]) / 3
	std := math.Sqrt(((r[0]-mean)*(r[0]-mean) + 2*(r[1]-mean)*(r[1]-mean)) / 3)
	want := map[int]float64{0: (r[0] - mean) / (std + 1e-6), 1: (0 - mean) / (std + 1e-6), 3: (0 - mean) / (std + 1e-6)}
	for _, s := range req.Samples {
		k := s.TokenIDs[0]
		w, ok := want[k]
		if !ok {
			t.Fatalf("sample %d (failed rollout) was sent to the update", k)
		}
		if math.Abs(s.Advantage-w) > 1e-12 {
			t.Errorf("sample %d advantage %v, want %v", k, s.Advantage, w)
		}
	}
	if !strings.Contains(req.StepID, "/r0/grpo-000001") {
		t.Errorf("step_id %q does not name the run generation and step", req.StepID)
	}
	recs := stepLedgers(t, run.Path)[1]
	for _, rec := range recs {
		if rec.Failed() && (rec.Included || rec.Reward != 0) {
			t.Errorf("failed rollout %d scored or included: %+v", rec.SampleIndex, rec)
		}
		if rec.Failed() && rec.ErrorKind == "" {
			t.Errorf("failed rollout without an error kind")
		}
	}
}

// TestLossConfigReachesThePolicy: grpo.loss as YAML gives it reaches the
// policy as the endpoint resolves it. A given clip_low 0 is 0 (the tightest
// lower clip; it used to leave the harness as an omitted field and arrive as
// 0.2), an absent or null key is the default (clip_high: the resolved
// clip_low, rlcore.DefaultLoss), and verl's dual clip and
// low_var_kl are sent; the request carries every loss field with its value.
func TestLossConfigReachesThePolicy(t *testing.T) {
	for _, c := range []struct {
		yaml              string
		clipLow, clipHigh float64
		klEst             string
		dual              float64
	}{
		{"{}", 0.2, 0.2, "k3", 0},
		{"{clip_low: 0}", 0, 0, "k3", 0},
		{"{clip_low: 0.1}", 0.1, 0.1, "k3", 0},
		{"{clip_low: 0, clip_high: 0}", 0, 0, "k3", 0},
		{"{clip_low: null, clip_high: null, max_grad_norm: null}", 0.2, 0.2, "k3", 0},
		{"{clip_ratio_c: 3, kl_estimator: low_var_kl}", 0.2, 0.2, "low_var_kl", 3},
	} {
		cfg := testConfig()
		// Other values first, so that a null that left them in place (as
		// YAML null does over a plain float) would show.
		cfg.Loss.ClipLow, cfg.Loss.ClipHigh, cfg.Loss.MaxGradNorm = new(0.3), new(0.4), new(5.0)
		if !strings.Contains(c.yaml, "null") {
			cfg.Loss = testConfig().Loss
		}
		dec := yaml.NewDecoder(strings.NewReader(c.yaml))
		dec.KnownFields(true)
		if err := dec.Decode(&cfg.Loss); err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		if err := cfg.Validate(); err != nil {
			t.Fatalf("%s: %v", c.yaml, err)
		}
		run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
		pol := newFakePolicy(" a", " b", " c", " d")
		tr := newTestLoop(t, cfg, pol, run)
		startMetrics(t, tr)
		if _, err := tr.Step(context.Background(), 1); err != nil {
			t.Fatal(err)
		}
		if len(pol.grpoCalls) != 1 {
			t.Fatalf("%d updates, want 1", len(pol.grpoCalls))
		}
		sent := pol.grpoCalls[0].Loss
		got, err := sent.Resolve() // as the endpoint reads it
		want := trainer.ResolvedLoss{Type: "grpo", ClipLow: c.clipLow, ClipHigh: c.clipHigh, KLEstimator: c.klEst, ClipRatioC: c.dual,
			Mu: 1, MaxGradNorm: 1, LearningRate: cfg.LearningRate, MaxLength: cfg.MaxTokens, Temperature: cfg.Temperature}
		if err != nil || got != want {
			t.Errorf("%s: the policy resolves %+v (%v), want %+v", c.yaml, got, err, want)
		}
		raw, _ := json.Marshal(sent)
		var fields map[string]any
		_ = json.Unmarshal(raw, &fields)
		for _, k := range []string{"type", "clip_low", "clip_high", "kl_coef", "kl_estimator", "clip_ratio_c", "mu",
			"max_grad_norm", "learning_rate", "weight_decay", "max_length", "temperature"} {
			if v, ok := fields[k]; !ok || v == nil {
				t.Errorf("%s: the request's loss has %s = %v, want every field with its value: %s", c.yaml, k, v, raw)
			}
		}
	}
}

func TestGuardsPenalizeAnswerLeak(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	// " paris france" writes the reference answer into the query.
	pol := newFakePolicy(" paris france", "", "", "")
	tr := newTestLoop(t, testConfig(), pol, run)
	startMetrics(t, tr)
	m, err := tr.Step(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if m.GuardLeak != 2 {
		t.Fatalf("answer leaks counted %d, want 2 (one per group)", m.GuardLeak)
	}
	if err := tr.flushLedger(); err != nil {
		t.Fatal(err)
	}
	recs := stepLedgers(t, run.Path)[1]
	if len(recs) != 8 {
		t.Fatalf("ledger of step 1: %d records, want 8", len(recs))
	}
	for _, r := range recs {
		if r.SampleIndex == 0 && r.Reward != -1 {
			t.Errorf("leaking rewrite got reward %v, want the penalty -1", r.Reward)
		}
		if r.SampleIndex == 0 && r.Advantage >= 0 {
			t.Errorf("leaking rewrite got advantage %v, want negative", r.Advantage)
		}
		// The penalty is its own term; Rouge-L stays the answer's.
		if r.SampleIndex == 0 && (r.Guard != "answer_leak" || r.GuardPenalty != -1 || r.RougeF1 < 0) {
			t.Errorf("leaking rewrite logged guard %q guard_penalty %v rougeL_f1 %v, want answer_leak, -1 and its real Rouge-L",
				r.Guard, r.GuardPenalty, r.RougeF1)
		}
	}
}

// TestResumeAlwaysLoadsItsCheckpoint: resume loads the run's own trainer
// checkpoint whatever version the trainer reports: an equal version may be
// another run's policy, a higher one has updates the checkpoint does not cover.
func TestResumeAlwaysLoadsItsCheckpoint(t *testing.T) {
	base, run, pol := freshRun(t)
	if err := newTestLoop(t, testConfig(), pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if pol.version != 2 || len(pol.loads) != 0 {
		t.Fatalf("version %d loads %v after 2 steps", pol.version, pol.loads)
	}
	st, _, err := rundir.LoadState(run, math.MaxInt, validState)
	if err != nil || len(st.RunID) != 12 {
		t.Fatalf("state %+v %v", st, err)
	}
	ckpt := func(step int) string { return fmt.Sprintf("run-%s-step-%06d", st.RunID, step) }
	if pol.savedRun[ckpt(2)] != st.RunID {
		t.Fatalf("trainer checkpoints %v (run ids %v), want %s saved with the run id", pol.saved, pol.savedRun, ckpt(2))
	}

	// Same version as recorded: loaded all the same.
	cfg := testConfig()
	cfg.Steps = 3
	run, _ = rundir.Open(base, "r", rundir.Resume)
	if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	run.Close()
	if fmt.Sprint(pol.loads) != fmt.Sprint([]string{ckpt(2)}) || pol.version != 3 {
		t.Fatalf("loads %v version %d, want %s loaded and one more update", pol.loads, pol.version, ckpt(2))
	}

	// An update applied after the last checkpoint (the trainer is ahead):
	// resume must load the checkpoint so the step is not applied twice.
	pol.version = 7
	cfg.Steps = 4
	run, _ = rundir.Open(base, "r", rundir.Resume)
	if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), true); err != nil {
		t.Fatal(err)
	}
	if len(pol.loads) != 2 || pol.loads[1] != ckpt(3) || pol.version != 4 {
		t.Fatalf("loads %v version %d; want %s loaded and one more update", pol.loads, pol.version, ckpt(3))
	}
	// Step ids of the replayed step are new (generation 2), so the trainer applies it.
	last := pol.grpoCalls[len(pol.grpoCalls)-1].StepID
	if !strings.Contains(last, "/r2/grpo-000004") {
		t.Fatalf("step id %q", last)
	}
	if _, err := os.Stat(run.File("metrics.jsonl")); err != nil {
		t.Fatal(err)
	}
}

func TestDynamicSamplingReplacesZeroVarianceGroups(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy("", "", "", "") // every rewrite alike: zero variance
	cfg := testConfig()
	cfg.DynamicSampling = DynamicSamplingConfig{MaxRounds: 2, MinZeroVarFrac: 0.5}
	tr := newTestLoop(t, cfg, pol, run)
	startMetrics(t, tr)
	calls := 0
	// The policy learns variety after the first draw.
	tr.deps.Policy = samplingHook{pol, func() {
		calls++
		if calls == 2 {
			pol.suffixes = []string{" paris", "", "", ""}
		}
	}}
	m, err := tr.Step(context.Background(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if calls != 2 || m.ResampledGroups != 2 || Val(m.ZeroVarFrac) != 0 {
		t.Fatalf("sample calls %d, resampled %d, zero-var %v; want 2, 2, 0", calls, m.ResampledGroups, Val(m.ZeroVarFrac))
	}
}

type samplingHook struct {
	*fakePolicy
	before func()
}

func (s samplingHook) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	s.before()
	return s.fakePolicy.Sample(ctx, req)
}

func TestEpochOrderIsSeededPermutation(t *testing.T) {
	a, b := epochOrder(50, 1, 0), epochOrder(50, 1, 0)
	c := epochOrder(50, 1, 1)
	seen := map[int]bool{}
	for i := range a {
		if a[i] != b[i] {
			t.Fatal("same seed and epoch must give the same order")
		}
		seen[a[i]] = true
	}
	if len(seen) != 50 {
		t.Fatal("not a permutation")
	}
	same := 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
	}
	if same == 50 {
		t.Fatal("epochs must reshuffle")
	}
}

func TestRetentionDeletesTrainerCheckpoints(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	cfg := testConfig()
	cfg.Steps, cfg.KeepCheckpoints = 4, 2
	cfg.BestMetric = "" // the best checkpoint would outlive the rotation (best_test.go)
	if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// Checkpoints after steps 0..4; the last two are kept, on both sides.
	st, _, err := rundir.LoadState(run, math.MaxInt, validState)
	if err != nil {
		t.Fatal(err)
	}
	name := func(step int) string { return fmt.Sprintf("run-%s-step-%06d", st.RunID, step) }
	if want := []string{name(0), name(1), name(2)}; fmt.Sprint(pol.deleted) != fmt.Sprint(want) {
		t.Fatalf("deleted %v, want %v", pol.deleted, want)
	}
	if len(pol.saved) != 2 || pol.saved[name(3)] != 3 || pol.saved[name(4)] != 4 {
		t.Fatalf("trainer keeps %v", pol.saved)
	}
	if steps, _ := run.StateSteps(); fmt.Sprint(steps) != "[3 4]" {
		t.Fatalf("harness keeps %v", steps)
	}
}

// stepLedgers reads every ledger file of the run at runPath and returns the
// records by step, failing on a step held by two files.
func stepLedgers(t *testing.T, runPath string) map[int][]rollout.Record {
	t.Helper()
	files, err := rundir.LedgerFiles(runPath)
	if err != nil {
		t.Fatal(err)
	}
	out := map[int][]rollout.Record{}
	for _, f := range files {
		recs, err := rollout.ReadLedger(t.Context(), f.Path)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range recs {
			if r.Step < f.First || r.Step > f.Last {
				t.Fatalf("%s holds a record of step %d", f.Path, r.Step)
			}
			out[r.Step] = append(out[r.Step], r)
		}
	}
	return out
}
