package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/ablate"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/sharedtest"
)

// Leave-one-collection-out on the two demo files as collections: each fold
// trains SFT and SFT+GRPO on the other file and evaluates on its own. The raw
// question on the demo eval turns is the quickstart's step-0 baseline
// (Recall@10 0.3948, README), whatever was trained.
func TestAblateTransferCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains four short runs (minutes)")
	}
	root := sharedtest.RepoRoot(t)
	cfg := filepath.Join(root, "configs", "quickstart.yaml")
	demo := filepath.Join(root, "datasets", "demo")
	out := t.TempDir()
	o, err := runHimesProcess(t, nil, "ablate", "transfer", "--config", cfg,
		"--collections", filepath.Join(demo, "train.jsonl")+","+filepath.Join(demo, "eval.jsonl"),
		"--set", "grpo.steps=2", "--set", "grpo.eval_every=0", "--set", "grpo.prompts_per_step=4",
		"--set", "grpo.group_size=4", "--set", "grpo.sft.epochs=1", "--jobs", "2", "--out", out)
	if err != nil {
		t.Fatalf("transfer: %v\n%s", err, o)
	}
	var res struct {
		Folds []ablate.TransferFold `json:"folds"`
		Rows  []ablate.TransferRow  `json:"rows"`
	}
	readEvalJSON(t, filepath.Join(out, "transfer.json"), &res)
	if len(res.Rows) != 2 || res.Rows[0].HeldOut != "train" || res.Rows[1].HeldOut != "eval" {
		t.Fatalf("rows %+v", res.Rows)
	}
	for _, r := range res.Rows {
		if len(r.Errors) > 0 {
			t.Fatalf("fold %s: %v", r.HeldOut, r.Errors)
		}
		var names []string
		for _, s := range r.Systems {
			names = append(names, s.Name)
		}
		if strings.Join(names, ",") != "raw,concat,gold,sft,sft+grpo" {
			t.Errorf("fold %s systems %v", r.HeldOut, names)
		}
	}
	// GRPO against SFT alone, paired by turn: on the same judged turns the
	// paired difference is the difference of the two policies' means.
	for _, r := range res.Rows {
		if len(r.VsSFT) != 1 || r.VsSFT[0].Variant != "sft+grpo" || r.VsSFT[0].Baseline != "sft" {
			t.Fatalf("fold %s: vs sft %+v", r.HeldOut, r.VsSFT)
		}
		var mean [2]float64
		for _, s := range r.Systems {
			switch s.Name {
			case "sft":
				mean[0] = s.Metrics[evaluate.MRecall10].Estimate.Mean
			case "sft+grpo":
				mean[1] = s.Metrics[evaluate.MRecall10].Estimate.Mean
			}
		}
		if c := r.VsSFT[0].Metrics[evaluate.MRecall10]; math.Abs(c.Diff-(mean[1]-mean[0])) > 1e-9 {
			t.Errorf("fold %s: paired Δ Recall@10 %v, want %v − %v", r.HeldOut, c.Diff, mean[1], mean[0])
		}
	}
	if !strings.Contains(o, "against SFT alone, paired by turn") {
		t.Errorf("output lacks the paired table:\n%s", o)
	}
	held := res.Rows[1]
	if held.Turns != 84 || held.TrainedOn[0] != "train" {
		t.Errorf("eval fold: %d turns, trained on %v; want 84, [train]", held.Turns, held.TrainedOn)
	}
	for _, s := range held.Systems {
		if s.Name == "raw" {
			if got := s.Metrics[evaluate.MRecall10].Estimate.Mean; math.Abs(got-0.3948) > 5e-5 {
				t.Errorf("raw Recall@10 on the demo eval turns = %.4f, want 0.3948", got)
			}
		}
	}
	for _, f := range []string{"transfer.md", "transfer.png", filepath.Join("eval", "train.jsonl"), filepath.Join("eval", "sft_grpo", "eval", "summary.json")} {
		if st, err := os.Stat(filepath.Join(out, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !strings.Contains(o, "share of the raw → human-rewrite Recall@10 gap closed") {
		t.Errorf("output lacks the gap table:\n%s", o)
	}
	// overall progress off a terminal: a line as each of the 4 runs ends
	for n := 1; n <= 4; n++ {
		if !strings.Contains(o, fmt.Sprintf(`msg="transfer progress" failed=0 done=%d total=4 `, n)) {
			t.Errorf("no progress line for run %d of 4:\n%s", n, o)
		}
	}
}

// --seeds trains each recipe once per seed, each run under its own seed, and
// summarizes the recipe over them.
func TestAblateTransferCLISeeds(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains four short runs (minutes)")
	}
	root := sharedtest.RepoRoot(t)
	demo := filepath.Join(root, "datasets", "demo")
	out := t.TempDir()
	o, err := runHimesProcess(t, nil, "ablate", "transfer", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--collections", filepath.Join(demo, "train.jsonl")+","+filepath.Join(demo, "eval.jsonl"),
		"--set", "grpo.steps=2", "--set", "grpo.eval_every=0", "--set", "grpo.prompts_per_step=4",
		"--set", "grpo.group_size=4", "--set", "grpo.sft.epochs=0", "--seeds", "4,9", "--jobs", "2", "--out", out)
	if err != nil {
		t.Fatalf("transfer: %v\n%s", err, o)
	}
	var res struct {
		Rows []ablate.TransferRow `json:"rows"`
	}
	readEvalJSON(t, filepath.Join(out, "transfer.json"), &res)
	for _, r := range res.Rows {
		if len(r.OverSeeds) != 1 || r.OverSeeds[0].Variant != "grpo" || fmt.Sprint(r.OverSeeds[0].Seeds) != "[4 9]" || r.OverSeeds[0].GapClosed.N != 2 {
			t.Errorf("fold %s over seeds %+v", r.HeldOut, r.OverSeeds)
		}
	}
	for _, seed := range []string{"4", "9"} {
		raw, err := os.ReadFile(filepath.Join(out, "eval", "grpo_seed_"+seed, "config.yaml"))
		if err != nil || !strings.Contains(string(raw), "\n    seed: "+seed+"\n") {
			t.Errorf("run of seed %s: config %v\n%s", seed, err, raw)
		}
	}
	if !strings.Contains(o, "### over seeds") {
		t.Errorf("output lacks the over-seeds table:\n%s", o)
	}

	// --resume adds a seed: the finished runs are kept untouched, a run
	// without its evaluation is resumed (nothing left to train) and
	// evaluated again, the new seed's runs train, and the table covers all.
	args := []string{"ablate", "transfer", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--collections", filepath.Join(demo, "train.jsonl") + "," + filepath.Join(demo, "eval.jsonl"),
		"--set", "grpo.steps=2", "--set", "grpo.eval_every=0", "--set", "grpo.prompts_per_step=4",
		"--set", "grpo.group_size=4", "--set", "grpo.sft.epochs=0", "--jobs", "2", "--out", out}
	kept := filepath.Join(out, "eval", "grpo_seed_4", "eval", "summary.json")
	before, err := os.Stat(kept)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(out, "train", "grpo_seed_9", "eval", "summary.json")); err != nil {
		t.Fatal(err)
	}
	if o, err := runHimesProcess(t, nil, append(args, "--seeds", "4,9")...); err == nil || !strings.Contains(o, "pass --resume") {
		t.Errorf("existing runs without --resume: err %v\n%s", err, o)
	}
	o, err = runHimesProcess(t, nil, append(args, "--seeds", "4,9,5", "--resume")...)
	if err != nil {
		t.Fatalf("transfer --resume: %v\n%s", err, o)
	}
	if n := strings.Count(o, "transfer run kept"); n != 3 {
		t.Errorf("%d runs kept, want 3 (seeds 4 and 9 of both folds but the one without its evaluation):\n%s", n, o)
	}
	// The progress counts only the runs that train: seed 5 in both folds
	// and the run without its evaluation.
	if !strings.Contains(o, `msg="transfer progress" failed=0 done=3 total=3 `) {
		t.Errorf("progress does not count 3 runs to train:\n%s", o)
	}
	if after, err := os.Stat(kept); err != nil || !after.ModTime().Equal(before.ModTime()) {
		t.Errorf("a kept run's evaluation was rewritten: %v", err)
	}
	if raw, err := os.ReadFile(filepath.Join(out, "train", "grpo_seed_9.train.log")); err != nil ||
		!strings.Contains(string(raw), "already finished at step 2") {
		t.Errorf("the run without its evaluation was not resumed as finished: %v\n%s", err, raw)
	}
	if _, err := os.Stat(filepath.Join(out, "train", "grpo_seed_9", "eval", "summary.json")); err != nil {
		t.Errorf("the resumed run was not evaluated again: %v", err)
	}
	readEvalJSON(t, filepath.Join(out, "transfer.json"), &res)
	for _, r := range res.Rows {
		if len(r.Errors) > 0 || len(r.OverSeeds) != 1 || fmt.Sprint(r.OverSeeds[0].Seeds) != "[4 9 5]" {
			t.Errorf("fold %s after --resume: errors %v, over seeds %+v", r.HeldOut, r.Errors, r.OverSeeds)
		}
	}
	// A finished run with another config is refused, naming the key.
	o, err = runHimesProcess(t, nil, append(args, "--seeds", "4", "--resume", "--set", "grpo.learning_rate=0.5")...)
	if err == nil || !strings.Contains(o, "ran with another config") || !strings.Contains(o, "grpo.learning_rate") {
		t.Errorf("--resume with a changed config: err %v\n%s", err, o)
	}
}

// --recipes sft,grpo,sft+grpo trains the three recipes per seed from the same
// data and seed, sets each against SFT alone paired by turn over the seeds,
// and with data.dev_fraction the runs pick their checkpoint on an in-domain
// dev split of the training collection, never on the left-out one.
func TestAblateTransferCLIRecipes(t *testing.T) {
	if testing.Short() {
		t.Skip("trains six short runs (three recipes, two seeds)")
	}
	root := sharedtest.RepoRoot(t)
	demo := filepath.Join(root, "datasets", "demo")
	out := t.TempDir()
	args := []string{"ablate", "transfer", "--config", filepath.Join(root, "configs", "quickstart.yaml"),
		"--collections", filepath.Join(demo, "train.jsonl") + "," + filepath.Join(demo, "eval.jsonl"), "--folds", "eval",
		"--recipes", "sft,grpo,sft+grpo", "--seeds", "1,2",
		"--set", "grpo.steps=2", "--set", "grpo.eval_every=1", "--set", "grpo.prompts_per_step=4",
		"--set", "grpo.group_size=4", "--set", "grpo.sft.epochs=1", "--set", "data.dev_fraction=0.2",
		"--jobs", "2", "--out", out}
	o, err := runHimesProcess(t, nil, args...)
	if err != nil {
		t.Fatalf("transfer: %v\n%s", err, o)
	}
	var res struct {
		Rows []ablate.TransferRow `json:"rows"`
	}
	readEvalJSON(t, filepath.Join(out, "transfer.json"), &res)
	if len(res.Rows) != 1 || res.Rows[0].HeldOut != "eval" || len(res.Rows[0].Errors) > 0 {
		t.Fatalf("rows %+v", res.Rows)
	}
	row := res.Rows[0]
	mean := map[string]float64{} // recipe -> mean over the seeds of its Recall@10
	for _, s := range row.Systems {
		if s.Base != "" {
			mean[s.Base] += s.Metrics[evaluate.MRecall10].Estimate.Mean / 2
		}
	}
	if len(row.Recipes) != 2 {
		t.Fatalf("recipes vs sft %+v", row.Recipes)
	}
	for i, want := range []string{"grpo", "sft+grpo"} {
		p := row.Recipes[i]
		if p.Recipe != want || fmt.Sprint(p.Seeds) != "[1 2]" {
			t.Errorf("recipe %d: %+v, want %s over seeds [1 2]", i, p, want)
		}
		// Every demo eval turn is judged, so the paired mean difference is
		// the difference of the recipes' means over seeds.
		if d := p.Metrics[evaluate.MRecall10]; math.Abs(d.VsSFT.Diff-(mean[want]-mean["sft"])) > 1e-9 || d.VsSFT.Lo > d.VsSFT.Diff || d.VsSFT.Hi < d.VsSFT.Diff {
			t.Errorf("%s: Δ Recall@10 %+v, want %v − %v", want, d, mean[want], mean["sft"])
		}
	}
	// Each recipe trained what it says: SFT alone has SFT epochs and no
	// GRPO step, GRPO alone steps and no SFT epoch, SFT+GRPO both.
	for run, want := range map[string][2]bool{"sft_seed_1": {true, false}, "grpo_seed_2": {false, true}, "sft_grpo_seed_1": {true, true}} {
		raw, err := os.ReadFile(filepath.Join(out, "eval", run, "metrics.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		got := [2]bool{strings.Contains(string(raw), `"kind":"sft"`), strings.Contains(string(raw), `"kind":"step"`)}
		if got != want {
			t.Errorf("%s: sft epochs, grpo steps = %v, want %v", run, got, want)
		}
		log, err := os.ReadFile(filepath.Join(out, "eval", run+".train.log"))
		if err != nil || !strings.Contains(string(log), "dev split") {
			t.Errorf("%s: no dev split in the training log: %v", run, err)
		}
		log, err = os.ReadFile(filepath.Join(out, "eval", run+".eval.log"))
		if err != nil || !strings.Contains(string(log), `"which":"best"`) {
			t.Errorf("%s: the left-out collection was not evaluated with the checkpoint chosen on dev: %v\n%s", run, err, log)
		}
	}
	if !strings.Contains(o, "recipes against SFT alone, paired by turn, mean over seeds") {
		t.Errorf("output lacks the recipes table:\n%s", o)
	}
	if st, err := os.Stat(filepath.Join(out, "recipes.png")); err != nil || st.Size() < 1000 {
		t.Errorf("recipes.png: %v", err)
	}
	// --resume keeps every finished run of every recipe.
	o, err = runHimesProcess(t, nil, append(args, "--resume")...)
	if err != nil {
		t.Fatalf("transfer --resume: %v\n%s", err, o)
	}
	if n := strings.Count(o, "transfer run kept"); n != 6 {
		t.Errorf("%d runs kept, want all 6:\n%s", n, o)
	}
}
