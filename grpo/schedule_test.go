package grpo

import (
	"bufio"
	"context"
	"encoding/json"
	"math"
	"os"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
)

// Hand-computed schedule values (peak 1e-3), the Hugging Face definitions
// with the warmup shifted by one step so that step 1 is not 0.
func TestLearningRateScheduleByHand(t *testing.T) {
	const lr = 1e-3
	for _, c := range []struct {
		o           OptimizerConfig
		step, steps int
		want        float64
	}{
		{OptimizerConfig{Schedule: "constant"}, 1, 100, 1e-3},
		{OptimizerConfig{Schedule: "constant", WarmupSteps: 10}, 1, 100, 1e-4},  // 1/10 of the peak
		{OptimizerConfig{Schedule: "constant", WarmupSteps: 10}, 5, 100, 5e-4},  // 5/10
		{OptimizerConfig{Schedule: "constant", WarmupSteps: 10}, 10, 100, 1e-3}, // warmup end
		{OptimizerConfig{Schedule: "constant", WarmupSteps: 10}, 50, 100, 1e-3},
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 1, 110, 1e-4},
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 10, 110, 1e-3},
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 11, 110, 1e-3},                 // progress 0
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 36, 110, 8.535533905932737e-4}, // p = ¼: ½(1 + cos π/4)
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 61, 110, 5e-4},                 // mid-cosine: p = ½
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10, MinLRRatio: 0.1}, 61, 110, 5.5e-4},
		{OptimizerConfig{Schedule: "cosine"}, 1, 100, 1e-3},
		{OptimizerConfig{Schedule: "cosine"}, 100, 100, 2.4671981713420017e-7}, // p = .99: ½(1 − cos .01π)
		{OptimizerConfig{Schedule: "linear", WarmupSteps: 10}, 36, 110, 7.5e-4},
		{OptimizerConfig{Schedule: "linear", WarmupSteps: 10}, 110, 110, 1e-5}, // p = .99
		{OptimizerConfig{Schedule: "linear", WarmupSteps: 10, MinLRRatio: 0.5}, 61, 110, 7.5e-4},
		// A warmup longer than the run is cut to the run: 2 steps, ½ then the peak.
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 1, 2, 5e-4},
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: 10}, 2, 2, 1e-3},
	} {
		got := c.o.LearningRate(lr, c.step, c.steps)
		if math.Abs(got-c.want) > 1e-15 {
			t.Errorf("%+v step %d of %d: lr %v, want %v", c.o, c.step, c.steps, got, c.want)
		}
	}
}

func TestOptimizerConfigValidate(t *testing.T) {
	for _, c := range []struct {
		o    OptimizerConfig
		want string
	}{
		{OptimizerConfig{Schedule: "step"}, "optimizer.schedule"},
		{OptimizerConfig{Schedule: "cosine", WarmupSteps: -1}, "optimizer.warmup_steps"},
		{OptimizerConfig{Schedule: "cosine", MinLRRatio: 1.5}, "optimizer.min_lr_ratio"},
		{OptimizerConfig{Schedule: "cosine", WeightDecay: -0.1}, "optimizer.weight_decay"},
	} {
		cfg := DefaultConfig() // 50 steps
		cfg.Optimizer = c.o
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: got %v, want an error naming %s", c.o, err, c.want)
		}
	}
}

// The loop sends each step's scheduled learning rate and the weight decay,
// and logs the learning rate of every step in metrics.jsonl.
func TestLoopSendsScheduleAndLogsLR(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	cfg := testConfig()
	cfg.Steps, cfg.LearningRate = 4, 0.1
	cfg.Optimizer = OptimizerConfig{Schedule: "cosine", WarmupSteps: 2, WeightDecay: 0.01}
	if err := newTestLoop(t, cfg, pol, run).Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// Warmup ½, 1; then progress 0 and ½ of two decay steps: 1, ½.
	want := []float64{0.05, 0.1, 0.1, 0.05}
	if len(pol.grpoCalls) != 4 {
		t.Fatalf("%d updates", len(pol.grpoCalls))
	}
	for i, req := range pol.grpoCalls {
		if math.Abs(*req.Loss.LearningRate-want[i]) > 1e-15 || *req.Loss.WeightDecay != 0.01 {
			t.Errorf("step %d: learning_rate %v weight_decay %v, want %v and 0.01", i+1, *req.Loss.LearningRate, *req.Loss.WeightDecay, want[i])
		}
	}
	f, err := os.Open(run.File("metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var logged []float64
	for sc := bufio.NewScanner(f); sc.Scan(); {
		var m StepMetrics
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		if m.Kind == "step" {
			logged = append(logged, m.LR)
		}
	}
	if len(logged) != 4 {
		t.Fatalf("logged lr %v", logged)
	}
	for i := range want {
		if math.Abs(logged[i]-want[i]) > 1e-15 {
			t.Errorf("metrics.jsonl step %d lr %v, want %v", i+1, logged[i], want[i])
		}
	}
}

func TestWeightDecayNeedsCapableEndpoint(t *testing.T) {
	run, _ := rundir.Open(t.TempDir(), "r", rundir.New)
	pol := newFakePolicy(" paris", "")
	pol.noWeightDecay = true
	cfg := testConfig()
	cfg.Optimizer.WeightDecay = 0.01
	err := newTestLoop(t, cfg, pol, run).Run(context.Background(), false)
	if err == nil || !strings.Contains(err.Error(), "weight_decay") || len(pol.grpoCalls) != 0 {
		t.Fatalf("got %v after %d updates, want a weight_decay error before any update", err, len(pol.grpoCalls))
	}
}
