package hser

import (
	"math"
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
