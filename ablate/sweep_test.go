package ablate

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/grpo"
)

func sweepBase(t *testing.T) configs.Config {
	t.Helper()
	dir := t.TempDir()
	train := filepath.Join(dir, "train.jsonl")
	if err := os.WriteFile(train, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := configs.Default()
	cfg.Data.Train = train
	cfg.Run.Name, cfg.Run.OutputDir = "abl", filepath.Join(dir, "runs")
	return cfg
}

func TestSweepPlansRunsLaunchesBoundedAndGathers(t *testing.T) {
	base := sweepBase(t)
	g, err := ParseGrid([]byte("alpha: [0, 1]\nbeta: [0, 0.5]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := PlanSweep(g, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) != 4 || runs[1].RunName != "abl-alpha_0_beta_0.5" || runs[1].RunDir != filepath.Join(base.Run.OutputDir, "abl-alpha_0_beta_0.5") {
		t.Fatalf("planned %+v", runs)
	}

	// A fake trainer: writes metrics.jsonl whose final eval encodes α and β;
	// the point alpha=1 beta=0.5 fails. Never more than 2 at once.
	var mu sync.Mutex
	running, peak := 0, 0
	errs := RunSweep(context.Background(), runs, 2, func(_ context.Context, r SweepRun) error {
		mu.Lock()
		running++
		peak = max(peak, running)
		mu.Unlock()
		defer func() { mu.Lock(); running--; mu.Unlock() }()
		if r.Name == "alpha=1 beta=0.5" {
			return errors.New("exit status 1")
		}
		if err := os.MkdirAll(r.RunDir, 0o755); err != nil {
			return err
		}
		var b bytes.Buffer
		enc := json.NewEncoder(&b)
		for s := 1; s <= 10; s++ {
			_ = enc.Encode(grpo.StepMetrics{Kind: "step", Step: s, RewardMean: ptr(float64(s) / 10)})
		}
		pol := 0.5
		if strings.Contains(r.Name, "alpha=1") {
			pol = 0.75
		}
		_ = enc.Encode(grpo.EvalMetrics{Kind: "eval", Step: 10,
			Policy: grpo.EvalSystem{Terms: grpo.Terms{Reward: pol}, Recall10: ptr(0.5), NDCG3: ptr(0.125)},
			Raw:    grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.25}, Recall10: ptr(0.375), NDCG3: ptr(0.25)}})
		return os.WriteFile(filepath.Join(r.RunDir, "metrics.jsonl"), b.Bytes(), 0o644)
	})
	if peak > 2 {
		t.Fatalf("%d runs at once with --parallel 2", peak)
	}
	rows := GatherSweep(context.Background(), runs, errs)
	if rows[3].Error == "" || rows[0].Error != "" {
		t.Fatalf("errors: %q / %q", rows[0].Error, rows[3].Error)
	}
	if *rows[2].PolicyReward != 0.75 || *rows[0].PolicyReward != 0.5 || *rows[0].RawReward != 0.25 || rows[0].EvalStep != 10 {
		t.Fatalf("gathered %+v", rows[:3])
	}
	// Start = step 1 (a tenth of 10 steps), end = step 10.
	if *rows[0].RewardStart != 0.1 || *rows[0].RewardEnd != 1 {
		t.Fatalf("train reward %v → %v, want 0.1 → 1", *rows[0].RewardStart, *rows[0].RewardEnd)
	}
	var md bytes.Buffer
	if err := WriteSweepMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| alpha=1 beta=0 | abl-alpha_1_beta_0 | 10 | 0.100 → 1.000 | 10 | 0.750 | 0.250 | +0.500 | 0.500 | 0.375 | – | – | 0.125 | 0.250 | ok |", "failed: exit status 1"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, md.String())
		}
	}
}

func TestPlanSweepValidatesEveryPointFirst(t *testing.T) {
	g, err := ParseGrid([]byte("grpo.group_size: [4, 1]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = PlanSweep(g, sweepBase(t))
	if err == nil || !strings.Contains(err.Error(), "group_size") || !strings.Contains(err.Error(), "grid.yaml") {
		t.Fatalf("got %v, want a validation error for group_size=1 naming grid.yaml", err)
	}
	g, err = ParseGrid([]byte("grpo.no_such_key: [1]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = PlanSweep(g, sweepBase(t)); err == nil || !strings.Contains(err.Error(), "grid.yaml:1") {
		t.Fatalf("got %v, want an unknown-key error at grid.yaml:1", err)
	}
}
