package hser

import (
	"math"
	"strings"
	"testing"
)

// The values are ConvSearch-R1's piecewise function worked by hand:
// 2 − (r−1)/9 inside the top 10, (100 − r)/90 from 11 to 100, 0 beyond or
// when nothing relevant was retrieved.
func TestRankRewardHandValues(t *testing.T) {
	for _, c := range []struct {
		rank int
		want float64
	}{
		{1, 2},
		{2, 17.0 / 9}, // 2 − 1/9 = 1.8889
		{10, 1},       // 2 − 9/9
		{11, 89.0 / 90},
		{55, 0.5}, // (100 − 55)/90
		{100, 0},  // the last rank that is searched earns nothing
		{101, 0},  // beyond the authors' top 100
		{0, 0},    // no relevant passage retrieved
		{-1, 0},   // the authors' "not found"
	} {
		if got := RankReward(c.rank); math.Abs(got-c.want) > 1e-12 {
			t.Errorf("RankReward(%d) = %v, want %v", c.rank, got, c.want)
		}
	}
	// The step at the top-10 boundary: leaving the top 10 costs about one point.
	if d := RankReward(10) - RankReward(11); math.Abs(d-1.0/90) > 1e-12 {
		t.Errorf("RankReward(10) − RankReward(11) = %v, want 1/90", d)
	}
}

func TestFirstRelevantRank(t *testing.T) {
	qrels := map[string]int{"p2": 0, "p5": 3, "p9": 1}
	for _, c := range []struct {
		ranking []string
		want    int
	}{
		{[]string{"p5", "p2"}, 1},
		{[]string{"p2", "p9", "p5"}, 2}, // grade 0 is judged not relevant
		{[]string{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "p9"}, 10}, // unjudged ids are not relevant
		{[]string{"x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "x9", "x10", "p5"}, 11},
		{[]string{"p2", "x1"}, 0},
		{nil, 0},
	} {
		if got := FirstRelevantRank(c.ranking, qrels); got != c.want {
			t.Errorf("FirstRelevantRank(%v) = %d, want %d", c.ranking, got, c.want)
		}
	}
}

// WithRank adds γ·RankReward to the HSER total and leaves it bit-identical
// when γ is 0.
func TestWithRank(t *testing.T) {
	cfg := DefaultConfig()
	s, err := NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	base := s.ScoreMulti("paris", []string{"paris"}, []string{"the capital is paris"})
	if base.Reward != 3 { // F1 1 + EM 1 + Hit 1
		t.Fatalf("base reward %v, want 3", base.Reward)
	}
	got := s.WithRank(base, 2)
	if got.Reward != base.Reward || !got.Judged || got.FirstRelevant != 2 || math.Abs(got.RankReward-17.0/9) > 1e-12 || got.Gamma != 0 {
		t.Errorf("γ=0: %+v", got)
	}
	cfg.Rank = 0.5
	s, err = NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	got = s.WithRank(base, 2)
	if want := 3 + 0.5*17.0/9; math.Abs(got.Reward-want) > 1e-12 || got.Gamma != 0.5 {
		t.Errorf("γ=0.5: reward %v, want %v (%+v)", got.Reward, want, got)
	}
	if got := s.WithRank(base, 0); got.Reward != 3 || got.RankReward != 0 || !got.Judged {
		t.Errorf("nothing relevant retrieved: %+v", got)
	}
	cfg.Rank = -1
	if _, err := NewScorer(cfg); err == nil {
		t.Error("a negative rank weight was accepted")
	}
}

// TestWithRetrievalByHand: the rewrite's ranking p1..p4 against judgments
// p2: 1, p4: 2, p7: 1 (never retrieved). By hand: first relevant rank 2,
// RankReward 2 − 1/9; Recall@3 = 1/3; NDCG@3 = (1/log2 3) / (2 + 1/log2 3 +
// 1/2); RR = 1/2. With weights recall 1 (k 3) and ndcg 1 (k 3), HSER's α =
// β = 0 and no rank weight, R = RougeF1 + Recall@3 + NDCG@3.
func TestWithRetrievalByHand(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Alpha, cfg.Beta = 0, 0
	cfg.Recall = RetrievalTerm{Weight: 1, K: 3}
	cfg.NDCG = RetrievalTerm{Weight: 1, K: 3}
	s, err := NewScorer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ranking := []string{"p1", "p2", "p3", "p4"}
	qrels := map[string]int{"p2": 1, "p4": 2, "p7": 1}
	sc := s.WithRetrieval(Score{RougeF1: 0.25, Reward: 0.25}, ranking, qrels)
	l3 := math.Log2(3)
	want := map[string][2]float64{
		"rank_reward": {sc.RankReward, 2 - 1.0/9},
		"recall_k":    {sc.RecallK, 1.0 / 3},
		"ndcg_k":      {sc.NDCGK, (1 / l3) / (2 + 1/l3 + 0.5)},
		"rr":          {sc.RR, 0.5},
		"reward":      {sc.Reward, 0.25 + 1.0/3 + (1/l3)/(2+1/l3+0.5)},
	}
	for name, v := range want {
		if math.Abs(v[0]-v[1]) > 1e-12 {
			t.Errorf("%s = %.15g, want %.15g", name, v[0], v[1])
		}
	}
	if !sc.Judged || sc.FirstRelevant != 2 {
		t.Errorf("judged %v first relevant %d, want true and 2", sc.Judged, sc.FirstRelevant)
	}

	// Every retrieval weight 0: the terms are recorded, R is HSER's bits.
	d, err := NewScorer(DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	base := Score{RougeF1: 0.3, EM: 1, Hit: 1, Reward: DefaultConfig().Reward(0.3, 1, 1)}
	if got := d.WithRetrieval(base, ranking, qrels); got.Reward != base.Reward || got.RR != 0.5 {
		t.Errorf("default weights: reward %v (want %v), rr %v (want 0.5)", got.Reward, base.Reward, got.RR)
	}
	if names := cfg.RetrievalTerms(); len(names) != 2 || names[0] != "reward.recall" || names[1] != "reward.ndcg" {
		t.Errorf("RetrievalTerms = %v", names)
	}
}

func TestRetrievalTermValidation(t *testing.T) {
	for _, c := range []struct {
		set  func(*Config)
		want string
	}{
		{func(c *Config) { c.Recall.Weight = -1 }, "recall.weight"},
		{func(c *Config) { c.NDCG.K = -1 }, "ndcg.k"},
		{func(c *Config) { c.RR.Weight = math.NaN() }, "rr.weight"},
	} {
		cfg := DefaultConfig()
		c.set(&cfg)
		if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v", c.want, err)
		}
	}
}
