package grpo

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
	"github.com/himes-rl/himes/trainer/embedded"
)

// restartingTrainer serves an embedded policy over HTTP and "restarts" it
// (a fresh policy at version 0, like a trainer killed and back within a
// second) right after its afterGRPO-th applied grpo_step. The restarted
// trainer keeps the checkpoint directory unless loseCheckpoints is set.
type restartingTrainer struct {
	t               *testing.T
	dir             string
	afterGRPO       int
	afterSFT        int // restart after this many sft_steps instead (0: never)
	loseCheckpoints bool
	// strip removes expected_policy_version from requests: an endpoint that
	// predates the field.
	strip bool

	mu       sync.Mutex
	policy   *embedded.Policy
	h        http.Handler
	grpo     int
	sft      int
	restarts int
}

func newRestartingTrainer(t *testing.T, afterGRPO int) *restartingTrainer {
	rt := &restartingTrainer{t: t, dir: t.TempDir(), afterGRPO: afterGRPO}
	rt.fresh()
	return rt
}

func (rt *restartingTrainer) fresh() {
	cfg := trainer.DefaultEmbeddedConfig()
	cfg.CheckpointDir = rt.dir
	p, err := embedded.New(cfg, nil)
	if err != nil {
		rt.t.Fatal(err)
	}
	rt.policy, rt.h = p, trainer.NewHandler(p, "")
}

func (rt *restartingTrainer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rt.strip && r.Method == http.MethodPost {
		var body map[string]any
		dec := json.NewDecoder(r.Body)
		dec.UseNumber() // seeds are int64: a float64 would round them
		if err := dec.Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		delete(body, "expected_policy_version")
		raw, _ := json.Marshal(body)
		r.Body = readCloser{strings.NewReader(string(raw))}
		r.ContentLength = int64(len(raw))
	}
	rt.mu.Lock()
	h := rt.h
	rt.mu.Unlock()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, r)
	rt.mu.Lock()
	if r.URL.Path == "/v1/sft_step" && rec.Code == http.StatusOK {
		rt.sft++
	}
	if r.URL.Path == "/v1/grpo_step" && rec.Code == http.StatusOK {
		rt.grpo++
	}
	if (r.URL.Path == "/v1/grpo_step" || r.URL.Path == "/v1/sft_step") && rec.Code == http.StatusOK {
		if rt.grpo == rt.afterGRPO || (rt.afterSFT > 0 && rt.sft == rt.afterSFT && rt.restarts == 0) {
			if rt.loseCheckpoints {
				rt.dir = rt.t.TempDir()
			}
			rt.fresh()
			rt.restarts++
		}
	}
	rt.mu.Unlock()
	for k, v := range rec.Header() {
		w.Header()[k] = v
	}
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

type readCloser struct{ *strings.Reader }

func (readCloser) Close() error { return nil }

func (rt *restartingTrainer) weights() []float64 {
	rt.mu.Lock()
	defer rt.mu.Unlock()
	return rt.policy.Weights()
}

func restartConfig() Config {
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery, cfg.EvalEvery, cfg.KeepCheckpoints = 6, 2, 3, 0
	cfg.LearningRate = 0.2
	return cfg
}

// runOver trains restartConfig against the endpoint at url.
func runOver(t *testing.T, url string, sft ...bool) (*rundir.RunDir, error) {
	t.Helper()
	run, err := rundir.Open(t.TempDir(), "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	c := trainer.NewClient(url, "", trainer.WithBackoff(time.Millisecond, time.Millisecond), trainer.WithLogger(discard()))
	tr := newTestLoop(t, restartConfig(), nil, run)
	tr.deps.Policy = c
	if len(sft) > 0 && sft[0] {
		// Set after NewLoop, which refuses SFT epochs without SFT turns.
		tr.cfg.SFT = SFTConfig{Epochs: 2, BatchSize: 2, LearningRate: 0.3}
		rewrite := "where is paris"
		for _, turn := range testTurns(4) {
			turn.Rewrite = &rewrite
			tr.deps.SFT = append(tr.deps.SFT, turn)
		}
	}
	tr.log = discard()
	return run, tr.Run(context.Background(), false)
}

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// metricsLines reads metrics.jsonl without timings, stamps and cache hits (they
// measure the machine and the process's warm cache, not the run).
func metricsLines(t *testing.T, run *rundir.RunDir) []map[string]any {
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
		for k := range m {
			if strings.HasPrefix(k, "t_") || k == "cache_hits" || k == "dedup_hits" || k == "time" || k == "elapsed_s" {
				delete(m, k)
			}
		}
		out = append(out, m)
	}
	return out
}

// TestTrainerRestartMidRunReloadsCheckpoint: the trainer restarts (fresh
// policy, version 0) after step 3; the last checkpoint is step 2's. The run
// notices at its next call, reloads that checkpoint into the restarted
// trainer, redoes step 3, and ends exactly where an uninterrupted run ends:
// same metrics, same final weights. Before the fix it trained the fresh
// policy from version 0 and exited 0.
func TestTrainerRestartMidRunReloadsCheckpoint(t *testing.T) {
	ref := newRestartingTrainer(t, -1)
	refSrv := httptest.NewServer(ref)
	defer refSrv.Close()
	refRun, err := runOver(t, refSrv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := metricsLines(t, refRun)

	for _, strip := range []bool{false, true} {
		t.Run(fmt.Sprintf("endpoint_ignores_expected_version=%v", strip), func(t *testing.T) {
			rt := newRestartingTrainer(t, 3)
			rt.strip = strip
			srv := httptest.NewServer(rt)
			defer srv.Close()
			run, err := runOver(t, srv.URL)
			if err != nil {
				t.Fatalf("run with a trainer restart: %v", err)
			}
			if rt.restarts != 1 {
				t.Fatalf("%d restarts, want 1", rt.restarts)
			}
			got := metricsLines(t, run)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("metrics differ from the uninterrupted run (%d vs %d lines):\n got %v\nwant %v", len(got), len(want), got, want)
			}
			if g, w := rt.weights(), ref.weights(); !reflect.DeepEqual(g, w) {
				t.Errorf("final weights %v, uninterrupted run %v", g, w)
			}
			if v := got[len(got)-2]["policy_version"]; v != float64(6) {
				t.Errorf("last step at policy_version %v, want 6", v)
			}
		})
	}
}

// TestTrainerRestartWithoutCheckpointStops: a trainer that restarts without
// the run's checkpoints cannot be brought back: the run stops with an error
// naming the checkpoint, instead of training the fresh policy.
func TestTrainerRestartWithoutCheckpointStops(t *testing.T) {
	rt := newRestartingTrainer(t, 3)
	rt.loseCheckpoints = true
	srv := httptest.NewServer(rt)
	defer srv.Close()
	_, err := runOver(t, srv.URL)
	if err == nil || trainer.ErrorCode(err) != trainer.CodeNotFound || !strings.Contains(err.Error(), "load trainer checkpoint \"run-") {
		t.Fatalf("run against a trainer that lost its checkpoints: %v, want a failed load of the run's checkpoint", err)
	}
	if rt.grpo != 3 || rt.weights()[0] != 0 {
		t.Errorf("%d updates applied (weights %v): the restarted policy was trained", rt.grpo, rt.weights())
	}
}

// TestFreshRunRefusesATrainedPolicy: a new run against a trainer whose
// policy another run has trained (version 3) refuses to start, and so does a
// resume without a checkpoint (an SFT phase killed half way leaves a
// trained policy and no checkpoint).
func TestFreshRunRefusesATrainedPolicy(t *testing.T) {
	for _, resume := range []bool{false, true} {
		pol := newFakePolicy(" paris", "")
		pol.version = 3
		run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
		err := newTestLoop(t, testConfig(), pol, run).Run(context.Background(), resume)
		if err == nil || !strings.Contains(err.Error(), "needs a fresh policy (policy_version 0), but the trainer's policy is at version 3") {
			t.Errorf("resume=%v: %v, want a refusal naming the versions", resume, err)
		}
		if len(pol.grpoCalls) != 0 || pol.version != 3 {
			t.Errorf("resume=%v: the trained policy was updated", resume)
		}
	}
}

// TestResumeRefusesAnotherRunsCheckpoint: a trainer that ignores
// expected_run_id and loads another run's checkpoint under this run's name
// is caught by the run id in the load response.
func TestResumeRefusesAnotherRunsCheckpoint(t *testing.T) {
	base, run, pol := freshRun(t)
	if err := newTestLoop(t, testConfig(), pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	run.Close()
	for name := range pol.savedRun {
		pol.savedRun[name] = "0123456789ab" // overwritten by another run
	}
	cfg := testConfig()
	cfg.Steps = 3
	run, _ = rundir.Open(base, "r", rundir.Resume)
	err := newTestLoop(t, cfg, pol, run).Run(context.Background(), true)
	if err == nil || !strings.Contains(err.Error(), `belongs to run "0123456789ab"`) {
		t.Fatalf("resume onto another run's checkpoint: %v", err)
	}
}

// TestLimitsCheckedAtStart: a config whose calls exceed the trainer's
// info.limits is refused before anything is trained.
func TestLimitsCheckedAtStart(t *testing.T) {
	pol := limitedPolicy{newFakePolicy(" paris", ""), trainer.Limits{MaxN: 2}}
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	tr := newTestLoop(t, testConfig(), pol.fakePolicy, run)
	tr.deps.Policy = pol
	err := tr.Run(context.Background(), false)
	if err == nil || err.Error() != "grpo.group_size 4 exceeds the trainer's info.limits.max_n 2" {
		t.Fatalf("group_size over max_n: %v", err)
	}
}

type limitedPolicy struct {
	*fakePolicy
	limits trainer.Limits
}

func (p limitedPolicy) Info(ctx context.Context) (trainer.Info, error) {
	info, err := p.fakePolicy.Info(ctx)
	info.Limits = p.limits
	return info, err
}

// TestEvalSplitsByMaxPrompts: an evaluation of more turns than the trainer
// accepts per call is split, with the same rewrites.
func TestEvalSplitsByMaxPrompts(t *testing.T) {
	pol := &countingSampler{limitedPolicy: limitedPolicy{newFakePolicy(" paris", ""), trainer.Limits{MaxPrompts: 3}}}
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	cfg := testConfig()
	cfg.PromptsPerStep = 2
	tr := newTestLoop(t, cfg, pol.fakePolicy, run)
	tr.deps.Policy = pol
	tr.deps.Eval = testTurns(7)
	if err := tr.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// Two evaluations (start, end) of 7 turns in calls of 3, 3, 1.
	if fmt.Sprint(pol.evalSizes) != "[3 3 1 3 3 1]" {
		t.Errorf("eval sample calls of %v prompts, want [3 3 1 3 3 1]", pol.evalSizes)
	}
}

type countingSampler struct {
	limitedPolicy
	evalSizes []int
}

func (c *countingSampler) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	if len(req.Prompts) > c.limits.MaxPrompts {
		return trainer.SampleResponse{}, fmt.Errorf("%d prompts over the limit", len(req.Prompts))
	}
	if req.Temperature == 0 {
		c.evalSizes = append(c.evalSizes, len(req.Prompts))
	}
	return c.fakePolicy.Sample(ctx, req)
}

// TestTrainerRestartDuringSFT: a restart in the SFT phase, before the first
// checkpoint, leaves nothing to reload: the run starts over on the restarted
// (fresh) trainer and ends as an uninterrupted run does.
func TestTrainerRestartDuringSFT(t *testing.T) {
	ref := newRestartingTrainer(t, -1)
	refSrv := httptest.NewServer(ref)
	defer refSrv.Close()
	refRun, err := runOver(t, refSrv.URL, true)
	if err != nil {
		t.Fatal(err)
	}
	rt := newRestartingTrainer(t, -1)
	rt.afterSFT = 3 // of 4: two epochs of two batches
	srv := httptest.NewServer(rt)
	defer srv.Close()
	run, err := runOver(t, srv.URL, true)
	if err != nil {
		t.Fatalf("run with a restart during SFT: %v", err)
	}
	if rt.restarts != 1 || rt.sft != 3+4 {
		t.Fatalf("%d restarts, %d sft_steps; want 1 and 3 + 4 (SFT redone)", rt.restarts, rt.sft)
	}
	if got, want := metricsLines(t, run), metricsLines(t, refRun); !reflect.DeepEqual(got, want) {
		t.Errorf("metrics differ from the uninterrupted run:\n got %v\nwant %v", got, want)
	}
	if g, w := rt.weights(), ref.weights(); !reflect.DeepEqual(g, w) {
		t.Errorf("final weights %v, uninterrupted run %v", g, w)
	}
}
