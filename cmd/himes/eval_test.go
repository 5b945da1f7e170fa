package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/internal/testdata"

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
		t.Skip("trains the quickstart for a few steps, several times")
	}
	root := testdata.RepoRoot(t)
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
	run("eval", "--run", runDir, "--rewriter", "raw,policy", "--out", filepath.Join(out, "ev-full"))
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
