package grpo

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/trainer"
)

func TestAddsNothingShare(t *testing.T) {
	raw := []string{"who won", "who won", "what is it", "when"}
	got := addsNothing([]string{"who won", "Who  won ", "what is it eiffel", "then"}, raw)
	if got != 0.5 { // the first two are the question up to case and spacing
		t.Fatalf("adds nothing %v, want 0.5", got)
	}
	if addsNothing(nil, nil) != 0 {
		t.Fatal("no turns: want 0")
	}
}

func TestCollapseDetectorFiresOnlyOnAddsNothingOrLowEntropy(t *testing.T) {
	c := DefaultCollapseConfig() // adds_nothing 0.95, entropy_floor 0.01
	eval := func(phase string, step int, share float64) EvalMetrics {
		return EvalMetrics{Step: step, Phase: phase, Turns: 20, Policy: EvalSystem{AddsNothing: new(share)}}
	}
	for _, tc := range []struct {
		m    EvalMetrics
		fire bool
	}{
		{eval("grpo", 75, 1), true},
		{eval("grpo", 75, 0.95), true},
		{eval("grpo", 75, 0.9), false},
		{eval("grpo", 75, 0), false},
		// The untrained (or SFT) policy is judged by nobody: only GRPO collapses.
		{eval("init", 0, 1), false},
		{eval("sft", 0, 1), false},
		{EvalMetrics{Step: 75, Phase: "grpo", Turns: 20}, false}, // share not computed
	} {
		if got := c.evalReason(tc.m) != ""; got != tc.fire {
			t.Errorf("%s step %d adds_nothing %v: fired %v, want %v", tc.m.Phase, tc.m.Step, Val(tc.m.Policy.AddsNothing), got, tc.fire)
		}
	}
	off := c
	off.AddsNothing = 0
	if off.evalReason(eval("grpo", 75, 1)) != "" {
		t.Error("adds_nothing 0 (off) still fired")
	}
	for _, tc := range []struct {
		e    *float64
		fire bool
	}{{new(0.001), true}, {new(0.0099), true}, {new(0.01), false}, {new(0.6), false}, {nil, false}} {
		if got := c.entropyReason(tc.e) != ""; got != tc.fire {
			t.Errorf("entropy %v: fired %v, want %v", Val(tc.e), got, tc.fire)
		}
	}
}

// collapsingPolicy is a versionPolicy whose greedy rewrites are the raw
// question from version from on: the policy learned to add nothing.
type collapsingPolicy struct {
	versionPolicy
	from int64
}

func (p collapsingPolicy) Sample(ctx context.Context, req trainer.SampleRequest) (trainer.SampleResponse, error) {
	resp, err := p.versionPolicy.Sample(ctx, req)
	if req.Temperature == 0 && resp.PolicyVersion >= p.from {
		for i := range resp.Samples {
			resp.Samples[i].Text = req.Prompts[resp.Samples[i].PromptIndex].Dialogue.Question
		}
	}
	return resp, err
}

// collapseRun trains 4 steps, evaluating after each: Recall@10 by version
// 0, 1 (the best, step 1), .5, then from version 3 the greedy policy adds
// nothing (the raw question: Recall@10 0 in this ranker).
func collapseRun(t *testing.T, onCollapse string, loadBest *bool) (*Loop, *fakePolicy, *rundir.RunDir, error) {
	t.Helper()
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	cfg := bestConfig(4, 0, 0)
	cfg.Collapse = DefaultCollapseConfig()
	cfg.OnCollapse = onCollapse
	cfg.LoadBestAtEnd = loadBest
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	l := newBestLoop(t, cfg, pol, run, []int{0, 2, 1, 1, 1, 1})
	l.deps.Policy = collapsingPolicy{versionPolicy{pol}, 3}
	err := l.Run(context.Background(), false)
	return l, pol, run, err
}

func collapseLines(t *testing.T, run *rundir.RunDir) []CollapseMetrics {
	t.Helper()
	b, err := os.ReadFile(run.File("metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []CollapseMetrics
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		var m CollapseMetrics
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind == "collapse" {
			out = append(out, m)
		}
	}
	return out
}

func sentLR(c trainer.GRPORequest) float64 { return *c.Loss.LearningRate }

func TestCollapseWarnNamesTheStepAndChangesNothing(t *testing.T) {
	_, pol, run, err := collapseRun(t, CollapseWarn, new(false))
	if err != nil {
		t.Fatal(err)
	}
	lines := collapseLines(t, run)
	// Versions 3 and 4 add nothing: the evaluations after steps 3 and 4.
	if len(lines) != 2 || lines[0].Step != 3 || lines[1].Step != 4 || lines[0].Action != "warn" ||
		lines[0].BestStep != nil || lines[0].LRScale != 1 || !strings.Contains(lines[0].Reason, "100% of the held-out turns") {
		t.Fatalf("collapse lines %+v", lines)
	}
	if len(pol.loads) != 0 || pol.version != 4 {
		t.Fatalf("warn loaded %v, version %d; want nothing loaded, version 4", pol.loads, pol.version)
	}
	for i, c := range pol.grpoCalls {
		if sentLR(c) != sentLR(pol.grpoCalls[0]) {
			t.Fatalf("step %d learning rate %v, want %v throughout", i+1, sentLR(c), sentLR(pol.grpoCalls[0]))
		}
	}
}

func TestCollapseStopCheckpointsAndStops(t *testing.T) {
	l, pol, _, err := collapseRun(t, CollapseStop, new(false))
	if err == nil || !strings.Contains(err.Error(), "step 3: the policy collapsed") {
		t.Fatalf("err = %v, want a collapse at step 3", err)
	}
	if len(pol.grpoCalls) != 3 || l.state.Step != 3 {
		t.Fatalf("%d updates, state at step %d; want the run stopped after step 3", len(pol.grpoCalls), l.state.Step)
	}
	if latest, err := LoadCheckpointState(l.deps.Run, "latest"); err != nil || latest.Step != 3 {
		t.Fatalf("latest checkpoint %+v, %v; want step 3 saved before stopping", latest, err)
	}
}

func TestCollapseRollbackReloadsTheBestAndLowersTheLearningRate(t *testing.T) {
	l, pol, run, err := collapseRun(t, CollapseRollback, new(false))
	if err != nil {
		t.Fatal(err)
	}
	bestName := l.trainerCheckpointName(1)
	if len(pol.loads) != 1 || pol.loads[0] != bestName {
		t.Fatalf("loads %v, want only the best checkpoint %s", pol.loads, bestName)
	}
	// After the rollback at step 3 the policy is the best's (version 1);
	// step 4 updates it to version 2, which evaluates at .5: no collapse.
	lines := collapseLines(t, run)
	if len(lines) != 1 || lines[0].Step != 3 || lines[0].Action != "rollback" || lines[0].BestStep == nil ||
		*lines[0].BestStep != 1 || lines[0].LRScale != 0.5 {
		t.Fatalf("collapse lines %+v", lines)
	}
	st3, step, err := rundir.LoadState(run, 4, validState)
	if err != nil || step != 3 {
		t.Fatalf("checkpoint before step 4: step %d, %v", step, err)
	}
	if st3.PolicyVersion != 1 || pol.saved[st3.TrainerCheckpoint] != 1 || st3.LRScale != 0.5 {
		t.Fatalf("step 3 checkpoint %+v (trainer version %d): want the best's weights (version 1) and lr_scale 0.5",
			st3, pol.saved[st3.TrainerCheckpoint])
	}
	if pol.version != 2 || l.state.PolicyVersion != 2 {
		t.Fatalf("final version %d (state %d), want 2: the step after the rollback trained the best's weights",
			pol.version, l.state.PolicyVersion)
	}
	// The learning rate: constant schedule, halved from the step after the rollback.
	if len(pol.grpoCalls) != 4 || sentLR(pol.grpoCalls[3]) != 0.5*sentLR(pol.grpoCalls[2]) {
		t.Fatalf("learning rates %v, %v: want step 4's half of step 3's", sentLR(pol.grpoCalls[2]), sentLR(pol.grpoCalls[3]))
	}
	if *pol.grpoCalls[3].ExpectedPolicyVersion != 1 {
		t.Fatalf("step 4 expected version %d, want 1 (the best's)", *pol.grpoCalls[3].ExpectedPolicyVersion)
	}
}

func TestLoadBestAtEndMakesTheBestTheFinalPolicy(t *testing.T) {
	l, pol, run, err := collapseRun(t, CollapseWarn, nil) // unset: on (held-out turns and a best_metric)
	if err != nil {
		t.Fatal(err)
	}
	bestName := l.trainerCheckpointName(1)
	if pol.version != 1 || len(pol.loads) != 1 || pol.loads[0] != bestName {
		t.Fatalf("final trainer version %d, loads %v; want the best (step 1, version 1)", pol.version, pol.loads)
	}
	st, ok, err := ReadStatus(run.Path)
	if err != nil || !ok || st.Final == nil || st.Final.Which != "best" || st.Final.Step != 1 || st.Final.Value == nil || *st.Final.Value != 1 {
		t.Fatalf("status final %+v (%v, %v), want best step 1 value 1", st.Final, ok, err)
	}
	// The latest checkpoint is still the last step's, for --resume and --checkpoint latest.
	if latest, err := LoadCheckpointState(run, "latest"); err != nil || latest.Step != 4 || latest.PolicyVersion != 4 {
		t.Fatalf("latest %+v, %v", latest, err)
	}

	_, pol, run, err = collapseRun(t, CollapseWarn, new(false))
	if err != nil {
		t.Fatal(err)
	}
	st, _, _ = ReadStatus(run.Path)
	if pol.version != 4 || len(pol.loads) != 0 || st.Final == nil || st.Final.Which != "latest" || st.Final.Step != 4 {
		t.Fatalf("load_best_at_end false: version %d, loads %v, final %+v; want the latest (4)", pol.version, pol.loads, st.Final)
	}
}

// A policy that has added nothing since the start (the untrained embedded
// policy keeps no term greedily) is not learning yet, not collapsed.
func TestNoCollapseBeforeThePolicyEverRewrote(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	cfg := bestConfig(3, 0, 0)
	cfg.Collapse, cfg.OnCollapse = DefaultCollapseConfig(), CollapseStop
	l := newBestLoop(t, cfg, newFakePolicy(" paris", ""), run, []int{0, 0, 0, 0})
	l.deps.Policy = collapsingPolicy{versionPolicy{l.deps.Policy.(versionPolicy).fakePolicy}, 0} // raw from the start
	if err := l.Run(context.Background(), false); err != nil {
		t.Fatalf("a policy that never rewrote stopped the run: %v", err)
	}
	if lines := collapseLines(t, run); len(lines) != 0 || l.state.Rewrote {
		t.Fatalf("collapse lines %+v, rewrote %v; want none", lines, l.state.Rewrote)
	}
}

func TestCollapseConfigValidation(t *testing.T) {
	for _, tc := range []struct {
		edit func(*Config)
		want string
	}{
		{func(c *Config) { c.OnCollapse = "panic" }, "on_collapse"},
		{func(c *Config) { c.Collapse.AddsNothing = 1.5 }, "collapse.adds_nothing"},
		{func(c *Config) { c.Collapse.EntropyFloor = -1 }, "collapse.entropy_floor"},
		{func(c *Config) { c.Collapse.LRFactor = 0 }, "collapse.lr_factor"},
		{func(c *Config) { c.OnCollapse, c.BestMetric = CollapseRollback, "" }, "on_collapse"},
		{func(c *Config) { c.LoadBestAtEnd, c.BestMetric = new(true), "" }, "load_best_at_end"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("err = %v, want one naming %s", err, tc.want)
		}
	}
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatal(err)
	}
}

// The KL is reported under "kl" when it is in the loss, under
// "kl_measured" when kl_coef is 0 and the endpoint measured it anyway, and
// absent otherwise; weight_norm and bias pass through when reported.
func TestStepMetricsKLInLossMeasuredOrAbsent(t *testing.T) {
	resp := trainer.GRPOResponse{KL: 0.3, WeightNorm: new(2.0), Bias: new(-1.0)}
	for _, c := range []struct {
		upd              updateReport
		wantKL, wantMeas bool
	}{
		{updateReport{resp: resp, sent: true, kl: true}, true, false},
		{updateReport{resp: resp, sent: true, klMeasured: true}, false, true},
		{updateReport{resp: resp, sent: true}, false, false},
	} {
		m := stepMetrics(1, 0, &stepBatch{}, rlcore.Advantages{}, c.upd, 0)
		if (m.KL != nil) != c.wantKL || (m.KLMeasured != nil) != c.wantMeas {
			t.Errorf("%+v: kl %v, kl_measured %v", c.upd, m.KL, m.KLMeasured)
		}
		for _, p := range []*float64{m.KL, m.KLMeasured} {
			if p != nil && *p != 0.3 {
				t.Errorf("%+v: reported KL %v, want 0.3", c.upd, *p)
			}
		}
		if Val(m.WeightNorm) != 2 || Val(m.Bias) != -1 {
			t.Errorf("weight_norm %v bias %v, want 2 and -1", m.WeightNorm, m.Bias)
		}
	}
}

// When no evaluation beats step 0's, load_best_at_end makes the starting
// policy the final one; that is what the metric says, but it must be said
// out loud, not pass as a trained result.
func TestLoadBestAtEndWarnsWhenTheBestIsTheStart(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	cfg := bestConfig(3, 0, 0)
	cfg.LoadBestAtEnd = new(true)
	l := newBestLoop(t, cfg, newFakePolicy(" paris", ""), run, []int{0, 0, 0, 0})
	var logs strings.Builder
	l.log = slog.New(slog.NewTextHandler(&logs, nil))
	if err := l.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	st, _, _ := ReadStatus(run.Path)
	if st.Final == nil || st.Final.Which != "best" || st.Final.Step != 0 {
		t.Fatalf("final %+v, want the best at step 0", st.Final)
	}
	if !strings.Contains(logs.String(), "no evaluation improved on step 0") {
		t.Errorf("no warning that the final policy is the starting one:\n%s", logs.String())
	}
}
