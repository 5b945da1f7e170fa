package rollout

import (
	"fmt"
	"log/slog"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
)

// setScore copies every reward term of s into the record.
func setScore(rec *Record, s hser.Score) {
	rec.RougeP, rec.RougeR, rec.RougeF1 = s.RougeP, s.RougeR, s.RougeF1
	rec.EM, rec.SquadEM, rec.SquadF1, rec.Hit = s.EM, s.SquadEM, s.SquadF1, s.Hit
	rec.Alpha, rec.Beta, rec.Reward = s.Alpha, s.Beta, s.Reward
	rec.Judged, rec.FirstRelevantRank, rec.RankReward, rec.Gamma = s.Judged, s.FirstRelevant, s.RankReward, s.Gamma
}

// CheckRankReward refuses reward.rank > 0 (weight) when a prompt turn has no
// relevance judgments: its rank term would not exist, and scoring it 0 would
// teach the policy that the rewrite retrieved nothing. depth is the passage
// ranking's depth bound (retrieval.candidates); below hser.RankRewardDepth
// the ranks it cannot see score as "none retrieved", which the log says.
func CheckRankReward(weight float64, turns []datasets.Turn, depth int, log *slog.Logger) error {
	if weight == 0 {
		return nil
	}
	var missing []string
	for _, t := range turns {
		if len(t.Qrels()) == 0 {
			missing = append(missing, t.ID())
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("reward.rank is %v but %d of %d prompt turns have no relevance judgments (first: %s); set data.judged_only: true to train and evaluate on judged turns only, or reward.rank: 0",
			weight, len(missing), len(turns), missing[0])
	}
	if depth < hser.RankRewardDepth {
		log.Warn("reward.rank: the passage ranking is shallower than ConvSearch-R1's top 100; a first relevant passage below it scores as none retrieved",
			"retrieval.candidates", depth, "rank_reward_depth", hser.RankRewardDepth)
	}
	return nil
}
