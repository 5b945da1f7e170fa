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
		w := hser.Weights{Alpha: r.Float64() * 3, Beta: r.Float64() * 3}
		if i%2 == 0 {
			w.Rank = r.Float64()
		}
		sc := hser.Score{RougeF1: r.Float64(), EM: float64(r.IntN(2)), Hit: float64(r.IntN(2)), RankReward: r.Float64() * 2}
		got := rlWeights(w).Reward(sampleReward(true, sc, false, 0).Terms)
		if want := w.RewardRanked(sc.RougeF1, sc.EM, sc.Hit, sc.RankReward); got != want {
			t.Fatalf("%+v %+v: rlcore %v, hser %v", w, sc, got, want)
		}
	}
}
