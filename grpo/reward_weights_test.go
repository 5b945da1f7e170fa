package grpo

import (
	"math/rand/v2"
	"testing"

	"github.com/himes-rl/himes/hser"
)

// TestRewardWeightsMatchHSER: rlcore's total reward (which the "sum"
// aggregation normalizes) is hser's RewardRanked bit for bit, with and
// without the rank term, on random terms and weights.
func TestRewardWeightsMatchHSER(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	for i := range 10000 {
		c := hser.DefaultConfig()
		c.Alpha, c.Beta = r.Float64()*3, r.Float64()*3
		if i%2 == 0 {
			c.Rank = r.Float64()
		}
		if i%3 == 0 {
			c.Recall.Weight, c.NDCG.Weight, c.RR.Weight = r.Float64(), r.Float64(), r.Float64()
		}
		if i%5 == 0 {
			c.RougeL = new(r.Float64())
		}
		sc := hser.Score{RougeF1: r.Float64(), EM: float64(r.IntN(2)), Hit: float64(r.IntN(2)), RankReward: r.Float64() * 2,
			RecallK: r.Float64(), NDCGK: r.Float64(), RR: r.Float64()}
		got := RewardWeights(c).Reward(sampleReward(true, sc, false, 0).Terms)
		want := c.RetrievalReward(c.RewardRanked(sc.RougeF1, sc.EM, sc.Hit, sc.RankReward), sc.RecallK, sc.NDCGK, sc.RR)
		if got != want {
			t.Fatalf("%+v %+v: rlcore %v, hser %v", c, sc, got, want)
		}
	}
}
