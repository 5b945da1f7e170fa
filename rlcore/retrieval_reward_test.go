package rlcore

import (
	"math"
	"testing"
)

// R = NDCG@3 + Recall@10 (Rouge-L, EM and Hit weighted 0): the advantages
// follow the retrieval terms alone, by hand. Group 1: rewards 1.5, 0.5 →
// mean 1, population std 0.5 → advantages ±1/(0.5+ε)·0.5. Group 2: the
// answers' Rouge-L differ but the retrieval terms do not, so the group
// teaches nothing (zero variance) and every advantage is 0.
func TestRetrievalRewardAdvantages(t *testing.T) {
	w := Weights{RougeL: new(0.0), NDCG: 1, Recall: 1}
	groups := [][]SampleReward{
		{
			{Valid: true, Terms: Terms{RougeF1: 0.1, NDCG: 0.5, Recall: 1}},
			{Valid: true, Terms: Terms{RougeF1: 0.9, NDCG: 0.5, Recall: 0}},
		},
		{
			{Valid: true, Terms: Terms{RougeF1: 0.1, NDCG: 1, Recall: 1}},
			{Valid: true, Terms: Terms{RougeF1: 0.8, NDCG: 1, Recall: 1}},
		},
	}
	cfg := DefaultAdvantageConfig()
	adv, err := DefaultRegistry().ComputeAdvantages(cfg, w, groups)
	if err != nil {
		t.Fatal(err)
	}
	want := 0.5 / (0.5 + cfg.Epsilon)
	if a := adv.Values[0]; math.Abs(a[0]-want) > 1e-12 || math.Abs(a[1]+want) > 1e-12 {
		t.Fatalf("group 1 advantages %v, want ±%v", a, want)
	}
	if a := adv.Values[1]; a[0] != 0 || a[1] != 0 {
		t.Fatalf("group 2 advantages %v, want 0 (its retrieval terms are constant)", a)
	}
	if !TeachesNothing(cfg, w, groups[1]) || TeachesNothing(cfg, w, groups[0]) {
		t.Fatal("zero variance must be judged on the weighted terms only")
	}
	// Per-term normalization: with Rouge-L weighted 0 it is not a term.
	cfg.Aggregation = "sum_of_normalized"
	if !TeachesNothing(cfg, w, groups[1]) {
		t.Fatal("sum_of_normalized: Rouge-L at weight 0 made a group vary")
	}
	// The total: w·F1 + the weighted retrieval terms, weight 0 left out.
	if r := w.Reward(groups[0][0].Terms); r != 1.5 {
		t.Fatalf("R = %v, want 0·0.1 + 0.5 + 1 = 1.5", r)
	}
	// An unset Rouge-L weight is HSER's 1.
	if r := (Weights{Alpha: 1}).Reward(Terms{RougeF1: 0.25, EM: 1, Recall: 1}); r != 1.25 {
		t.Fatalf("R = %v, want 0.25 + 1 = 1.25 (recall weight 0)", r)
	}
}
