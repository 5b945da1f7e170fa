package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
	"github.com/himes-rl/himes/internal/stats"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/report"
)

// The quickstart through the user's commands: a short training run, then
// rescoring its ledger, evaluating its checkpoint, and a sweep. (Plots are
// covered by the report package's tests; rendering them under -race is slow.)
func TestEvalAblateReportCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the quickstart for a few steps, several times")
	}
	root := sharedtest.RepoRoot(t)
	cfg := filepath.Join(root, "configs", "quickstart.yaml")
	out := t.TempDir()
	sets := []string{"--set", "run.output_dir=" + out, "--set", "grpo.steps=2", "--set", "grpo.eval_every=2",
		"--set", "grpo.prompts_per_step=4", "--set", "grpo.group_size=4"}
	run := func(args ...string) string {
		t.Helper()
		o, err := runHimesProcess(t, nil, args...)
		if err != nil {
			t.Fatalf("himes %s: %v\n%s", strings.Join(args, " "), err, o)
		}
		return o
	}
	// A too_long guard that catches some rewrites (the quickstart's are
	// about 40 words at the start): the rescore below must reproduce their
	// penalties exactly too.
	run(append([]string{"train", "--config", cfg, "--set", "run.name=q", "--set", "grpo.guards.too_long=penalty",
		"--set", "grpo.guards.max_rewrite_words=42"}, sets...)...)
	runDir := filepath.Join(out, "q")
	if m, err := report.LoadRun(context.Background(), runDir); err != nil || len(m.Steps) == 0 || m.Steps[0].GuardTooLong == 0 ||
		m.Steps[0].GuardTooLong == m.Steps[0].Rollouts {
		t.Fatalf("the too_long guard should catch some but not all step-1 rewrites: %v %+v", err, m.Steps)
	}

	grid := filepath.Join(out, "grid.yaml")
	if err := os.WriteFile(grid, []byte("alpha: [0, 1]\nhit: [answer, gold]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := run("ablate", "rescore", runDir, "--grid", grid)
	if !strings.Contains(o, "| own (run's own) |") {
		t.Fatalf("rescore table lacks the own row:\n%s", o)
	}
	var res []ablate.RescoreResult
	readEvalJSON(t, filepath.Join(runDir, "rescore.json"), &res)
	if len(res) != 5 || !res[0].Own || res[0].MaxRewardDiff != 0 || res[0].MaxAdvantageDiff != 0 || res[0].Rollouts == 0 {
		t.Fatalf("rescore: %d settings, own %+v; want own first reproducing the log exactly", len(res), res[0])
	}

	// The run's checkpoint through himes eval on the run's own held-out
	// split must give what the training loop's last eval line says.
	// Default resampling (2000 at 95%, the run's seed), as the loop's own
	// evaluation uses, so the intervals must agree too.
	// --checkpoint latest: the default is the run's final (best) policy.
	run("eval", "--run", runDir, "--checkpoint", "latest", "--rewriter", "raw,policy", "--out", filepath.Join(out, "ev-full"))
	var full evaluate.Report
	readEvalJSON(t, filepath.Join(out, "ev-full", "summary.json"), &full)
	m, err := report.LoadRun(context.Background(), runDir)
	if err != nil {
		t.Fatal(err)
	}
	last := m.Evals[len(m.Evals)-1]
	if last.Step != 2 {
		t.Fatalf("last eval at step %d, want 2 (the final checkpoint)", last.Step)
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"policy reward", full.Systems[1].Metrics[evaluate.MReward].Mean, last.Policy.Reward},
		{"policy recall_10", full.Systems[1].Metrics[evaluate.MRecall10].Mean, grpo.Val(last.Policy.Recall10)},
		{"policy mrr", full.Systems[1].Metrics[evaluate.MMRR].Mean, grpo.Val(last.Policy.MRR)},
		{"policy ndcg_cut_3", full.Systems[1].Metrics[evaluate.MNDCG3].Mean, grpo.Val(last.Policy.NDCG3)},
		{"raw ndcg_cut_3", full.Systems[0].Metrics[evaluate.MNDCG3].Mean, grpo.Val(last.Raw.NDCG3)},
		{"raw reward", full.Systems[0].Metrics[evaluate.MReward].Mean, last.Raw.Reward},
		{"raw recall_10", full.Systems[0].Metrics[evaluate.MRecall10].Mean, grpo.Val(last.Raw.Recall10)},
	} {
		if math.Abs(c.got-c.want) > 1e-9 {
			t.Errorf("%s: himes eval %v, training eval %v", c.name, c.got, c.want)
		}
	}
	for _, c := range []struct {
		name string
		est  stats.Estimate
		iv   *grpo.Interval
	}{
		{"policy reward", full.Systems[1].Metrics[evaluate.MReward], last.Policy.CI.Reward},
		{"policy recall_10", full.Systems[1].Metrics[evaluate.MRecall10], last.Policy.CI.Recall10},
		{"raw mrr", full.Systems[0].Metrics[evaluate.MMRR], last.Raw.CI.MRR},
		{"policy ndcg_cut_3", full.Systems[1].Metrics[evaluate.MNDCG3], last.Policy.CI.NDCG3},
	} {
		if c.iv == nil || math.Abs(c.est.Lo-c.iv.Lo) > 1e-9 || math.Abs(c.est.Hi-c.iv.Hi) > 1e-9 || !(c.iv.Lo < c.iv.Hi) {
			t.Errorf("%s interval: himes eval [%v, %v], training eval %+v", c.name, c.est.Lo, c.est.Hi, c.iv)
		}
	}

	evalDir := filepath.Join(out, "ev")
	o = run("eval", "--run", runDir, "--rewriter", "raw,gold,policy", "--limit", "2", "--resamples", "200", "--out", evalDir)
	if !strings.Contains(o, "| gold | vs raw |") {
		t.Fatalf("eval output lacks the paired comparison:\n%s", o)
	}
	// No --checkpoint: the run's final policy, the best (grpo.load_best_at_end), named on its rows.
	if !strings.Contains(o, "| policy (best: step ") || !strings.Contains(o, "eval.policy.recall_10") {
		t.Fatalf("eval output does not name the policy's checkpoint:\n%s", o)
	}
	// Without --rewriter, evaluating a run evaluates its policy too.
	defDir := filepath.Join(out, "ev-default")
	run("eval", "--run", runDir, "--limit", "1", "--resamples", "50", "--out", defDir)
	var def evaluate.Report
	readEvalJSON(t, filepath.Join(defDir, "summary.json"), &def)
	var rewriters []string
	for _, s := range def.Systems {
		rewriters = append(rewriters, s.Rewriter)
	}
	if strings.Join(rewriters, ",") != "raw,concat,gold,policy" {
		t.Fatalf("eval --run without --rewriter evaluated %v, want raw, concat, gold and the run's policy", rewriters)
	}
	var rep evaluate.Report
	readEvalJSON(t, filepath.Join(evalDir, "summary.json"), &rep)
	if len(rep.Systems) != 3 || rep.Conversations != 2 || rep.Systems[1].VsBaseline[evaluate.MRecall10].Turns == 0 {
		t.Fatalf("summary: %+v", rep)
	}
	for _, f := range []string{"turns.parquet", "qrels.txt", "summary.md", filepath.Join("runs", "raw.trec"), filepath.Join("runs", "policy.trec")} {
		if st, err := os.Stat(filepath.Join(evalDir, f)); err != nil || st.Size() == 0 {
			t.Fatalf("eval output %s: %v", f, err)
		}
	}

	sgrid := filepath.Join(out, "sweep.yaml")
	if err := os.WriteFile(sgrid, []byte("reward.beta: [0]\nreward.alpha: 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o = run(append([]string{"ablate", "sweep", "--config", cfg, "--grid", sgrid, "--parallel", "2", "--report=false", "--set", "run.name=s"}, sets...)...)
	if !strings.Contains(o, "| beta=0 alpha=0.5 | s-beta_0_alpha_0.5 | 2 |") {
		t.Fatalf("sweep table:\n%s", o)
	}
}

func readEvalJSON(t *testing.T, path string, v any) {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

// grpo.best_metric keeps a checkpoint the keep-last-K rotation would drop,
// and himes eval --checkpoint best evaluates exactly that policy. best_mode
// min over Recall@10 makes the untrained step 0 the "best", so best and
// latest are different policies and the rotation (keep 1) removes step 0's
// harness state.
func TestEvalBestCheckpointCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the quickstart for a few steps")
	}
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	out := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		if o, err := runHimesProcess(t, nil, args...); err != nil {
			t.Fatalf("himes %s: %v\n%s", strings.Join(args, " "), err, o)
		}
	}
	run("train", "--config", cfg, "--set", "run.output_dir="+out, "--set", "run.name=b", "--set", "grpo.steps=10",
		"--set", "grpo.eval_every=5", "--set", "grpo.prompts_per_step=8", "--set", "grpo.group_size=4",
		"--set", "grpo.keep_checkpoints=1", "--set", "grpo.best_metric=eval.policy.recall_10", "--set", "grpo.best_mode=min")
	runDir := filepath.Join(out, "b")
	m, err := report.LoadRun(context.Background(), runDir)
	if err != nil {
		t.Fatal(err)
	}
	worst, last := m.Evals[0], m.Evals[len(m.Evals)-1]
	for _, e := range m.Evals {
		if grpo.Val(e.Policy.Recall10) < grpo.Val(worst.Policy.Recall10) {
			worst = e
		}
	}
	if worst.Step == last.Step || grpo.Val(worst.Policy.Recall10) == grpo.Val(last.Policy.Recall10) {
		t.Fatalf("the fixture needs a best (step %d) other than the latest (step %d)", worst.Step, last.Step)
	}
	if _, err := os.Stat(filepath.Join(runDir, "state", fmt.Sprintf("step-%06d.json", worst.Step))); !os.IsNotExist(err) {
		t.Fatalf("the rotation should have removed step %d's harness state: %v", worst.Step, err)
	}
	for which, want := range map[string]float64{"best": grpo.Val(worst.Policy.Recall10), "latest": grpo.Val(last.Policy.Recall10)} {
		dir := filepath.Join(out, "ev-"+which)
		run("eval", "--run", runDir, "--checkpoint", which, "--rewriter", "policy", "--resamples", "100", "--out", dir)
		var rep evaluate.Report
		readEvalJSON(t, filepath.Join(dir, "summary.json"), &rep)
		if got := rep.Systems[0].Metrics[evaluate.MRecall10].Mean; math.Abs(got-want) > 1e-9 {
			t.Errorf("--checkpoint %s: Recall@10 %v, want %v", which, got, want)
		}
	}
}

// ablate sweep over run.seed summarizes the seeds of a point, and the
// sweep's overlaid report lists the config keys that differ (run.seed).
func TestSweepOverSeedsCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains the quickstart for a few steps, twice")
	}
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	out := t.TempDir()
	grid := filepath.Join(out, "seeds.yaml")
	if err := os.WriteFile(grid, []byte("seed: [1, 2]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o, err := runHimesProcess(t, nil, "ablate", "sweep", "--config", cfg, "--grid", grid, "--set", "run.output_dir="+out,
		"--set", "run.name=s", "--set", "grpo.steps=4", "--set", "grpo.eval_every=2", "--set", "grpo.prompts_per_step=4",
		"--set", "grpo.group_size=4")
	if err != nil {
		t.Fatalf("%v\n%s", err, o)
	}
	var groups []ablate.SeedGroup
	readEvalJSON(t, filepath.Join(out, "s-sweep", "sweep_seeds.json"), &groups)
	var rows []ablate.SweepRow
	readEvalJSON(t, filepath.Join(out, "s-sweep", "sweep.json"), &rows)
	if len(groups) != 1 || len(rows) != 2 || fmt.Sprint(groups[0].Seeds) != "[1 2]" {
		t.Fatalf("groups %+v rows %d", groups, len(rows))
	}
	pr := groups[0].Metrics["policy_reward"]
	a, b := *rows[0].PolicyReward, *rows[1].PolicyReward
	if pr.N != 2 || math.Abs(*pr.Mean-(a+b)/2) > 1e-12 || math.Abs(*pr.SD-math.Abs(a-b)/math.Sqrt2) > 1e-12 {
		t.Fatalf("policy reward over seeds %+v, runs %v and %v", pr, a, b)
	}
	if !strings.Contains(o, "Over seeds") || !strings.Contains(o, "| (all) | 1, 2 | 2 |") {
		t.Errorf("stdout lacks the seed table:\n%s", o)
	}
	// overall progress off a terminal: a line as each of the 2 runs ends
	for n := 1; n <= 2; n++ {
		if !strings.Contains(o, fmt.Sprintf(`msg="sweep progress" failed=0 done=%d total=2 `, n)) {
			t.Errorf("no progress line for run %d of 2:\n%s", n, o)
		}
	}
	md, err := os.ReadFile(filepath.Join(out, "s-sweep", "report", "report.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "| run.seed | 1 | 2 |") {
		t.Errorf("report.md lacks the config difference run.seed:\n%s", md)
	}
}
