package grpo

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
)

// Without --checkpoint, `himes eval --run` (and export) use the run's final
// policy: what status.json's final says (grpo.load_best_at_end), else the
// best checkpoint the run kept; the label names step and metric value.
func TestRunCheckpointFollowsTheRunsFinalPolicy(t *testing.T) {
	run, err := rundir.Open(t.TempDir(), "run", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	best := State{RunID: "0123456789ab", Step: 50, PolicyVersion: 50, TrainerCheckpoint: "run-x-step-000050",
		SFTDone: true, SavedAt: time.Now().UTC()}
	best.Best = &BestCheckpoint{Metric: "eval.policy.recall_10", Mode: "max", Value: 0.47, Step: 50, TrainerCheckpoint: best.TrainerCheckpoint}
	latest := best
	latest.Step, latest.PolicyVersion, latest.TrainerCheckpoint = 300, 300, "run-x-step-000300"
	if err := run.SaveBest(best); err != nil {
		t.Fatal(err)
	}
	if _, err := run.SaveState(300, latest, 1); err != nil {
		t.Fatal(err)
	}
	status := func(final *FinalCheckpoint) {
		b, _ := json.Marshal(Status{State: StateFinished, Steps: 300, Final: final})
		if err := os.WriteFile(filepath.Join(run.Path, StatusFile), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	bestLabel, latestLabel := "best: step 50, eval.policy.recall_10 0.4700", "latest: step 300"
	for _, c := range []struct {
		what        string
		final       *FinalCheckpoint
		flag        string
		name, label string
		writeStatus bool
	}{
		{"no status.json: the best kept", nil, "", best.TrainerCheckpoint, bestLabel, false},
		{"final best", &FinalCheckpoint{Which: "best", Step: 50}, "", best.TrainerCheckpoint, bestLabel, true},
		{"final latest (load_best_at_end off)", &FinalCheckpoint{Which: "latest", Step: 300}, "", latest.TrainerCheckpoint, latestLabel, true},
		{"--checkpoint latest over final best", &FinalCheckpoint{Which: "best", Step: 50}, "latest", latest.TrainerCheckpoint, latestLabel, true},
		{"--checkpoint best over final latest", &FinalCheckpoint{Which: "latest", Step: 300}, "best", best.TrainerCheckpoint, bestLabel, true},
	} {
		if c.writeStatus {
			status(c.final)
		}
		got, err := ResolveRunCheckpoint(run.Path, c.flag)
		if err != nil {
			t.Fatalf("%s: %v", c.what, err)
		}
		if got.Name != c.name || got.Label != c.label {
			t.Errorf("%s: %s (%q), want %s (%q)", c.what, got.Name, got.Label, c.name, c.label)
		}
	}
}
