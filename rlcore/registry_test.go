package rlcore

import (
	"slices"
	"testing"
)

// TestRegistryUnknownListsKeys: an unknown name is an error naming the
// registry's keys, sorted; the config error carries the field.
func TestRegistryUnknownListsKeys(t *testing.T) {
	reg := DefaultRegistry()
	if _, err := reg.AdvantageEstimator("foo"); err == nil || err.Error() != `unknown "foo" (known: batch, greedy, group, none, rloo)` {
		t.Errorf("advantage: %v", err)
	}
	if _, err := reg.Guard("foo"); err == nil || err.Error() != `unknown "foo" (known: answer_leak, copies_history, empty, too_long)` {
		t.Errorf("guard: %v", err)
	}
	c := DefaultAdvantageConfig()
	c.Estimator = "foo"
	if err := c.Validate(); err == nil || err.Error() != `estimator: unknown "foo" (known: batch, greedy, group, none, rloo)` {
		t.Errorf("config: %v", err)
	}
	if got, want := reg.Guards(), []string{GuardAnswerLeak, GuardEmpty, GuardTooLong, GuardCopiesHistory}; !slices.Equal(got, want) {
		t.Errorf("guards %v, want %v", got, want)
	}
}

// TestRegistryIsAValue: registering on one registry leaves a fresh default
// one alone, a duplicate or empty name is refused, and a registered
// estimator is selected by name: "max" (A = r − max r, hand-computed on
// 1, 2, 4: −3, −2, 0).
func TestRegistryIsAValue(t *testing.T) {
	reg := DefaultRegistry()
	max := AdvantageEstimator{Fn: func(vals []float64, _ EstimatorInput) {
		m := slices.Max(vals)
		for i := range vals {
			vals[i] -= m
		}
	}}
	if err := reg.RegisterAdvantageEstimator("max", max); err != nil {
		t.Fatal(err)
	}
	if err := reg.RegisterAdvantageEstimator("max", max); err == nil {
		t.Error("a duplicate name was accepted")
	}
	if err := reg.RegisterAdvantageEstimator(EstimatorGroup, max); err == nil {
		t.Error("a built-in's name was accepted")
	}
	if err := reg.RegisterAdvantageEstimator("", max); err == nil {
		t.Error("an empty name was accepted")
	}
	if err := reg.RegisterAdvantageEstimator("nil", AdvantageEstimator{}); err == nil {
		t.Error("a nil Fn was accepted")
	}
	if _, err := DefaultRegistry().AdvantageEstimator("max"); err == nil {
		t.Error("a fresh DefaultRegistry holds another registry's estimator")
	}
	c := DefaultAdvantageConfig()
	c.Estimator = "max"
	if err := c.ValidateWith(reg); err != nil {
		t.Fatal(err)
	}
	a, err := reg.ComputeAdvantages(c, Weights{}, [][]SampleReward{advRewards(1, 2, 4)})
	if err != nil {
		t.Fatal(err)
	}
	advCheck(t, "max", a.Values[0], []float64{-3, -2, 0})
}

// TestRunGuards: modes and order. "kw" (a caller's guard: the rewrite
// says "please") runs after the built-ins; flag counts, penalty also
// names, off skips.
func TestRunGuards(t *testing.T) {
	reg := DefaultRegistry()
	if err := reg.RegisterGuard("kw", func(in GuardInput) bool { return ContainsWords(in.Rewrite, "please") }); err != nil {
		t.Fatal(err)
	}
	gt := NewGuardTurn("when was it built", []string{"In 1889."}, nil, false)
	in := GuardInput{Rewrite: "please tell me it was built in 1889", Turn: gt, MaxRewriteWords: 3}
	modes := map[string]string{GuardAnswerLeak: "penalty", GuardEmpty: "penalty", GuardTooLong: "flag", GuardCopiesHistory: "off", "kw": "penalty"}
	var found []string
	got := reg.RunGuards(func(n string) string { return modes[n] }, in, func(n string) { found = append(found, n) })
	if want := []string{GuardAnswerLeak, "kw"}; !slices.Equal(got, want) {
		t.Errorf("penalized %v, want %v", got, want)
	}
	if want := []string{GuardAnswerLeak, GuardTooLong, "kw"}; !slices.Equal(found, want) {
		t.Errorf("found %v, want %v", found, want)
	}
}
