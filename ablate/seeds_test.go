package ablate

import (
	"bytes"
	"math"
	"strings"
	"testing"
)

func TestGroupSeedsByHand(t *testing.T) {
	g, err := ParseGrid([]byte("alpha: [0, 1]\nseed: [1, 2, 3]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	runs, err := PlanSweep(g, sweepBase(t))
	if err != nil {
		t.Fatal(err)
	}
	// alpha=0: policy reward .5, .6, .7 over seeds; alpha=1: .8, .9 and a failed seed 3.
	reward := []float64{0.5, 0.6, 0.7, 0.8, 0.9, 0}
	rows := make([]SweepRow, len(runs))
	for i, r := range runs {
		rows[i] = SweepRow{SweepRun: r, PolicyReward: ptr(reward[i]), RawReward: ptr(0.25), RewardEnd: ptr(1)}
	}
	rows[5].PolicyReward, rows[5].Error = nil, "exit status 1"
	groups := GroupSeeds(rows, 0.95)
	if len(groups) != 2 || groups[0].Name != "alpha=0" || groups[1].Name != "alpha=1" {
		t.Fatalf("groups %+v", groups)
	}
	a0 := groups[0].Metrics["policy_reward"]
	// mean .6, sd .1, t_{.975,2} = 4.303 (table): half-width 4.303·.1/√3.
	if half := 4.303 * 0.1 / math.Sqrt(3); a0.N != 3 || math.Abs(*a0.Mean-0.6) > 1e-12 || math.Abs(*a0.SD-0.1) > 1e-12 ||
		math.Abs(*a0.Lo-(0.6-half)) > 1e-4 || math.Abs(*a0.Hi-(0.6+half)) > 1e-4 {
		t.Errorf("alpha=0: %+v", a0)
	}
	if d := groups[0].Metrics["reward_vs_raw"]; math.Abs(*d.Mean-0.35) > 1e-12 {
		t.Errorf("Δ vs raw mean %v, want .35", *d.Mean)
	}
	a1 := groups[1].Metrics["policy_reward"]
	// Two seeds: mean .85, sd .1/√2, t_{.975,1} = 12.706: half-width 12.706·(.1/√2)/√2 = .6353.
	if groups[1].Failed != 1 || a1.N != 2 || math.Abs(*a1.Mean-0.85) > 1e-12 || math.Abs(*a1.Hi-0.85-0.6353) > 1e-3 {
		t.Errorf("alpha=1: failed %d, %+v", groups[1].Failed, a1)
	}
	if r10 := groups[0].Metrics["policy_recall_10"]; r10.N != 0 || r10.Mean != nil {
		t.Errorf("a metric no run has must stay empty, got %+v", r10)
	}
	var md bytes.Buffer
	if err := WriteSeedsMarkdown(&md, groups); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| alpha=0 | 1, 2, 3 | 3 | 0.600 ± 0.100 [0.352, 0.848] | 0.350 ± 0.100",
		"| alpha=1 | 1, 2, 3 | 2 | 0.850 ± 0.071 [0.215, 1.485] |", "95% Student-t interval"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, md.String())
		}
	}
	// No seed axis: no groups.
	g, _ = ParseGrid([]byte("alpha: [0, 1]\n"), "grid.yaml")
	runs, _ = PlanSweep(g, sweepBase(t))
	if GroupSeeds([]SweepRow{{SweepRun: runs[0]}, {SweepRun: runs[1]}}, 0.95) != nil {
		t.Error("a grid without run.seed must give no seed groups")
	}
}
