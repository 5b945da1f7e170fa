package grpo

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

// freshRun opens a new run "r" in a temporary directory, with a fake policy
// that answers " paris"; the caller closes the run (a resume reopens it).
func freshRun(t *testing.T) (base string, run *rundir.RunDir, pol *fakePolicy) {
	t.Helper()
	base = t.TempDir()
	run, err := rundir.Open(base, "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	return base, run, newFakePolicy(" paris", "")
}

// baseRun trains steps steps with a checkpoint after each (0..steps) and
// returns the run's parent directory and the policy.
func baseRun(t *testing.T, steps int) (string, *fakePolicy) {
	t.Helper()
	base, run, pol := freshRun(t)
	defer run.Close()
	cfg := testConfig()
	cfg.Steps = steps
	if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	if pol.version != int64(steps) {
		t.Fatalf("base run: version %d, want %d", pol.version, steps)
	}
	return base, pol
}

// resumeRun resumes base/r up to steps with policy p.
func resumeRun(t *testing.T, base string, steps int, p trainer.Policy, mutate func(*Loop)) error {
	t.Helper()
	run, err := rundir.Open(base, "r", rundir.Resume)
	if err != nil {
		t.Fatal(err)
	}
	defer run.Close()
	cfg := testConfig()
	cfg.Steps = steps
	l := newTestLoop(t, cfg, newFakePolicy(), run)
	l.deps.Policy = p
	if mutate != nil {
		mutate(l)
	}
	return l.Run(context.Background(), true)
}

// ckptName is the trainer checkpoint name of step in the run under base
// (names carry the run id, read from the step-3 state, which no case corrupts).
func ckptName(t *testing.T, base string, step int) string {
	t.Helper()
	b, err := os.ReadFile(statePath(base, 3))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		State State `json:"state"`
	}
	if err := json.Unmarshal(b, &f); err != nil || f.State.RunID == "" {
		t.Fatalf("run id of %s: %v", statePath(base, 3), err)
	}
	return fmt.Sprintf("run-%s-step-%06d", f.State.RunID, step)
}

func statePath(base string, step int) string {
	return filepath.Join(base, "r", "state", fmt.Sprintf("step-%06d.json", step))
}

func edit(t *testing.T, path string, f func(string) string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := f(string(b))
	if out == string(b) {
		t.Fatalf("edit of %s changed nothing", path)
	}
	if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

// Item 7 of issue 14: resume trusted hand-corrupted state. Each corruption
// of the newest checkpoint (after step 4) must make resume fall back to the
// one after step 3: the trainer loads step-000003 and steps 4 and 5 run,
// ending at policy version 5 with a readable ledger for each step.
func TestResumeFallsBackPastCorruptCheckpoint(t *testing.T) {
	cases := map[string]func(t *testing.T, base string){
		"edited step field": func(t *testing.T, base string) {
			edit(t, statePath(base, 4), func(s string) string {
				return regexp.MustCompile(`"step":\s*4`).ReplaceAllString(s, `"step": 2`)
			})
		},
		"edited policy version": func(t *testing.T, base string) {
			edit(t, statePath(base, 4), func(s string) string {
				return regexp.MustCompile(`"policy_version":\s*4`).ReplaceAllString(s, `"policy_version": 3`)
			})
		},
		"empty object as newest state": func(t *testing.T, base string) {
			edit(t, statePath(base, 4), func(string) string { return "{}" })
		},
		"truncated ledger of the checkpointed step": func(t *testing.T, base string) {
			edit(t, filepath.Join(base, "r", "ledger", "steps-000004-000004.parquet"), func(s string) string { return s[:len(s)/2] })
		},
		"valid checksum, invalid fields": func(t *testing.T, base string) {
			run, err := rundir.Open(base, "r", rundir.Resume)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			if _, err := run.SaveState(4, State{RunID: "x", Step: 4, PolicyVersion: 4, SFTDone: true}, 0); err != nil {
				t.Fatal(err) // no trainer checkpoint, no saved_at
			}
		},
	}
	for name, corrupt := range cases {
		t.Run(name, func(t *testing.T) {
			base, pol := baseRun(t, 4)
			want := ckptName(t, base, 3)
			corrupt(t, base)
			if err := resumeRun(t, base, 5, pol, nil); err != nil {
				t.Fatal(err)
			}
			if len(pol.loads) != 1 || pol.loads[0] != want || pol.version != 5 {
				t.Fatalf("loads %v version %d; want step-000003 loaded, then steps 4 and 5", pol.loads, pol.version)
			}
			ledgers := stepLedgers(t, filepath.Join(base, "r"))
			for step := 1; step <= 5; step++ {
				if recs := ledgers[step]; len(recs) != 8 {
					t.Fatalf("ledger of step %d: %d records", step, len(recs))
				}
			}
			if _, err := os.Stat(statePath(base, 4) + ".invalid"); err != nil {
				t.Fatal("the corrupt checkpoint must be set aside:", err)
			}
			run, err := rundir.Open(base, "r", rundir.Resume)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			st, step, err := rundir.LoadState(run, math.MaxInt, validState)
			if err != nil || step != 5 || st.PolicyVersion != 5 {
				t.Fatalf("newest checkpoint after the resume: step %d %+v %v", step, st, err)
			}
		})
	}
}

// refusingPolicy is a trainer whose checkpoint `refuse` fails to load (its
// weights fail their checksum, say).
type refusingPolicy struct {
	*fakePolicy
	refuse string
}

func (p refusingPolicy) Load(ctx context.Context, req trainer.LoadRequest) (trainer.LoadResponse, error) {
	if req.Name == p.refuse {
		return trainer.LoadResponse{}, &trainer.Error{Code: trainer.CodeInternal, Message: "checkpoint " + req.Name + ": weights checksum mismatch"}
	}
	return p.fakePolicy.Load(ctx, req)
}

func TestResumeFallsBackWhenTheTrainerRefusesItsCheckpoint(t *testing.T) {
	base, pol := baseRun(t, 4)
	pol.version = 0 // a restarted trainer: every resume must load
	if err := resumeRun(t, base, 5, refusingPolicy{pol, ckptName(t, base, 4)}, nil); err != nil {
		t.Fatal(err)
	}
	if len(pol.loads) != 1 || pol.loads[0] != ckptName(t, base, 3) || pol.version != 5 {
		t.Fatalf("loads %v version %d; want step-000003 loaded, then steps 4 and 5", pol.loads, pol.version)
	}
	// A trainer that cannot serve at all is an error, not a fall back.
	down := &unavailablePolicy{pol}
	err := resumeRun(t, base, 6, down, nil)
	if err == nil || !strings.Contains(err.Error(), "unavailable") {
		t.Fatalf("unavailable trainer: got %v", err)
	}
	if _, err := os.Stat(statePath(base, 5)); err != nil {
		t.Fatal("a failed resume must not set checkpoints aside:", err)
	}
}

type unavailablePolicy struct{ *fakePolicy }

func (unavailablePolicy) Info(context.Context) (trainer.Info, error) {
	return trainer.Info{PolicyVersion: 99}, nil
}

func (unavailablePolicy) Load(context.Context, trainer.LoadRequest) (trainer.LoadResponse, error) {
	return trainer.LoadResponse{}, &trainer.Error{Code: trainer.CodeUnavailable, Message: "unavailable: loading", Retryable: true}
}

// A process that died after applying an update but before its checkpoint
// must not share step ids with the next one: a trainer that remembers step
// ids would answer the replayed step from its log without applying it.
func TestResumeNeverReusesTheStepIDsOfALostAttempt(t *testing.T) {
	base, pol := baseRun(t, 1)
	// Attempt 2: steps 2 and 3, checkpoint only at the end; the update of
	// step 3 fails, after step 2's was applied.
	pol.onGRPO = func(req trainer.GRPORequest) error {
		if strings.HasSuffix(req.StepID, "grpo-000003") {
			return &trainer.Error{Code: trainer.CodeInternal, Message: "boom"}
		}
		return nil
	}
	err := resumeRun(t, base, 3, pol, func(l *Loop) { l.cfg.CheckpointEvery = 0 })
	if err == nil || pol.version != 2 {
		t.Fatalf("attempt 2: err %v version %d, want a failure after step 2's update", err, pol.version)
	}
	// Attempt 3 resumes from step 1 again and must apply steps 2 and 3.
	pol.onGRPO = nil
	if err := resumeRun(t, base, 3, pol, nil); err != nil {
		t.Fatal(err)
	}
	if pol.version != 3 {
		t.Fatalf("version %d after attempt 3, want 3 (step 2 replayed under a new step id)", pol.version)
	}
	ids := map[string]int{}
	for _, c := range pol.grpoCalls {
		ids[c.StepID]++
	}
	for id, n := range ids {
		if n > 1 {
			t.Errorf("step id %s sent %d times", id, n)
		}
	}
}

// Item 8 of issue 14: resume silently dropped any unparseable metrics line.
func TestResumeRefusesADamagedMetricsLog(t *testing.T) {
	base, pol := baseRun(t, 2)
	path := filepath.Join(base, "r", "metrics.jsonl")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.SplitAfter(string(b), "\n")
	damaged := lines[0] + "{not json\n" + strings.Join(lines[1:], "")
	if err := os.WriteFile(path, []byte(damaged), 0o644); err != nil {
		t.Fatal(err)
	}
	err = resumeRun(t, base, 3, pol, nil)
	if err == nil || !strings.Contains(err.Error(), "metrics.jsonl:2:") {
		t.Fatalf("damaged line 2: got %v, want an error naming metrics.jsonl:2", err)
	}
	if got, _ := os.ReadFile(path); string(got) != damaged {
		t.Fatal("a refused resume must leave the metrics log as it was")
	}

	// A torn last line (no newline: the crash hit mid-write) is cut.
	torn := string(b) + `{"kind":"step","st`
	if err := os.WriteFile(path, []byte(torn), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := resumeRun(t, base, 3, pol, nil); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(path)
	if !strings.HasPrefix(string(got), string(b)) || strings.Contains(string(got), `"st`+"\n") || !strings.HasSuffix(string(got), "\n") {
		t.Fatalf("torn last line not cut cleanly:\n%s", got)
	}
	if n := strings.Count(string(got), `"kind":"step"`); n != 3 {
		t.Fatalf("%d step lines after resuming to step 3, want 3", n)
	}
}

// sftPolicy applies SFT steps (the fake policy refuses them).
type sftPolicy struct{ *fakePolicy }

func (p sftPolicy) SFTStep(context.Context, trainer.SFTRequest) (trainer.SFTResponse, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.version++
	return trainer.SFTResponse{PolicyVersion: p.version}, nil
}

// Resumable decides whether a failed new run is removed (item 6 of issue
// 14): only a checkpoint after an SFT phase or a GRPO step holds work.
func TestResumableOnlyAfterTrainedWork(t *testing.T) {
	failAt := func(step string) func(trainer.GRPORequest) error {
		return func(req trainer.GRPORequest) error {
			if strings.HasSuffix(req.StepID, step) {
				return &trainer.Error{Code: trainer.CodeInternal, Message: "boom"}
			}
			return nil
		}
	}
	cases := []struct {
		name   string
		failAt string
		sft    bool
		want   bool
	}{
		{"fails at step 1, no SFT", "grpo-000001", false, false},
		{"fails at step 2 after step 1's checkpoint", "grpo-000002", false, true},
		{"fails at step 1 after SFT", "grpo-000001", true, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			run, err := rundir.Open(t.TempDir(), "r", rundir.New)
			if err != nil {
				t.Fatal(err)
			}
			defer run.Close()
			pol := newFakePolicy(" paris", "")
			pol.onGRPO = failAt(c.failAt)
			cfg := testConfig()
			l := newTestLoop(t, cfg, pol, run)
			if c.sft {
				l.cfg.SFT = SFTConfig{Epochs: 1, BatchSize: 2, LearningRate: 0.1}
				l.cfg.Optimizer.Reset = false // the fake policy has no optimizer_reset
				rw := "where is paris"
				l.deps.SFT = testTurns(2)
				for i := range l.deps.SFT {
					l.deps.SFT[i].Rewrite = &rw
				}
				l.deps.Policy = sftPolicy{pol}
			}
			if err := l.Run(context.Background(), false); err == nil {
				t.Fatal("the run must fail")
			}
			if got := l.Resumable(); got != c.want {
				t.Fatalf("Resumable() = %v, want %v", got, c.want)
			}
		})
	}
}
