package rlcore

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"testing"
)

var updateLossDefaults = flag.Bool("update-loss-defaults", false, "rewrite testdata/loss_defaults.json from DefaultLoss")

// TestLossDefaultsByHand: the one table, written out by hand (PROTOCOL.md,
// "LossConfig"; configs/README.md's grpo.loss rows).
func TestLossDefaultsByHand(t *testing.T) {
	d := DefaultLoss()
	if d.Type != "grpo" || d.ClipLow != 0.2 || d.ClipHigh != nil || d.KLCoef != 0 || d.KLEstimator != "k3" ||
		d.ClipRatioC != 0 || d.Mu != 1 || d.MaxGradNorm != 1 || d.WeightDecay != nil || d.MaxLength != nil || d.Temperature != 1 {
		t.Errorf("DefaultLoss() = %+v", d)
	}
}

// TestLossDefaultsFixture: testdata/loss_defaults.json is DefaultLoss as
// JSON, the file the Python trainer's test compares protocol.loss_defaults()
// with (scripts/lora_trainer/tests/test_protocol.py). Stale, it fails;
// `go test ./rlcore -run LossDefaultsFixture -update-loss-defaults` rewrites it.
func TestLossDefaultsFixture(t *testing.T) {
	want, err := json.MarshalIndent(DefaultLoss(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	want = append(want, '\n')
	const path = "testdata/loss_defaults.json"
	if *updateLossDefaults {
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s is stale (rerun with -update-loss-defaults):\n got %s\nwant %s", path, got, want)
	}
}

func validLoss() Loss {
	return Loss{Type: LossGRPO, ClipLow: 0.2, ClipHigh: 0.28, KLEstimator: KLK3, Mu: 1, MaxGradNorm: 1, LearningRate: 0.1, Temperature: 1}
}

// TestLossValidate: the ranges, and an unknown KL estimator named with the
// registry's keys.
func TestLossValidate(t *testing.T) {
	reg := DefaultRegistry()
	if err := validLoss().Validate(reg); err != nil {
		t.Fatal(err)
	}
	l := validLoss()
	l.ClipLow = 0 // the tightest lower clip, a valid value
	if err := l.Validate(reg); err != nil {
		t.Errorf("clip_low 0: %v", err)
	}
	l.ClipLow = 1
	if err := l.Validate(reg); err == nil || err.Error() != "clip_low: must be in [0, 1), got 1" {
		t.Errorf("clip_low 1: %v", err)
	}
	l = validLoss()
	l.KLEstimator = "k2"
	if err := l.Validate(reg); err == nil || err.Error() != `kl_estimator: unknown "k2" (known: k3, low_var_kl)` {
		t.Errorf("kl_estimator k2: %v", err)
	}
	// A registered estimator is valid.
	if err := reg.RegisterKLEstimator("k2", func(d float64) (float64, float64) { return d * d / 2, -d }); err != nil {
		t.Fatal(err)
	}
	if err := l.Validate(reg); err != nil {
		t.Errorf("registered k2: %v", err)
	}
}
