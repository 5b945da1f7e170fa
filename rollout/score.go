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
	rec.RecallK, rec.NDCGK, rec.RR = s.RecallK, s.NDCGK, s.RR
}

// CheckRankReward refuses reward.rank > 0 (weight) when a prompt turn has no
// relevance judgments: its rank term would not exist, and scoring it 0 would
// teach the policy that the rewrite retrieved nothing. depth is the passage
// ranking's depth bound (retrieval.candidates); below hser.RankRewardDepth
// the ranks it cannot see score as "none retrieved", which the log says.
func CheckRankReward(weight float64, turns []datasets.Turn, depth int, log *slog.Logger) error {
	if err := checkJudged("reward.rank", weight, turns); err != nil {
		return err
	}
	if weight != 0 && depth < hser.RankRewardDepth {
		log.Warn("reward.rank: the passage ranking is shallower than ConvSearch-R1's top 100; a first relevant passage below it scores as none retrieved",
			"retrieval.candidates", depth, "rank_reward_depth", hser.RankRewardDepth)
	}
	return nil
}

// CheckRetrievalReward is CheckRankReward for every retrieval term of the
// reward (reward.rank, reward.recall, reward.ndcg, reward.rr): each with a
// weight > 0 needs every prompt turn judged. A cutoff k deeper than the
// ranking (retrieval.candidates) is logged: the passages below it count as
// not retrieved.
func CheckRetrievalReward(c hser.Config, turns []datasets.Turn, depth int, log *slog.Logger) error {
	if err := CheckRankReward(c.Rank, turns, depth, log); err != nil {
		return err
	}
	for _, t := range []struct {
		name string
		term hser.RetrievalTerm
	}{{"reward.recall", c.Recall}, {"reward.ndcg", c.NDCG}, {"reward.rr", c.RR}} {
		if err := checkJudged(t.name+".weight", t.term.Weight, turns); err != nil {
			return err
		}
		if t.term.Weight != 0 && t.name != "reward.rr" && t.term.K > depth {
			log.Warn(t.name+": k is deeper than the passage ranking; passages below it count as not retrieved",
				"k", t.term.K, "retrieval.candidates", depth)
		}
	}
	return nil
}

func checkJudged(name string, weight float64, turns []datasets.Turn) error {
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
		return fmt.Errorf("%s is %v but %d of %d prompt turns have no relevance judgments (first: %s); set data.judged_only: true to train and evaluate on judged turns only, or %s: 0",
			name, weight, len(missing), len(turns), missing[0], name)
	}
	return nil
}
