package hser

// The rank-incentive retrieval reward of ConvSearch-R1 (Zhu et al. 2025,
// "ConvSearch-R1: Enhancing Query Reformulation for Conversational Search
// with Reasoning via Reinforcement Learning", arXiv:2505.15776, §3.3 "rank-
// incentive reward shaping"). The piecewise function below is the one of the
// authors' code, github.com/BeastyZ/ConvSearch-R1,
// verl/verl/utils/reward_score/rewrite_r1.py (cal_reward), read at commit
// 35370aec and reimplemented here: the rank is the 1-based position of the
// first relevant passage in the rewrite's ranking (their retrieval server's
// _get_gold_rank: the best rank over the turn's gold passages, searched to
// top 100), and
//
//	rank 1..10:   2 − (rank−1)/9   (2 at rank 1, 1 at rank 10)
//	rank 11..100: (100−rank)/90    (0.9889 at rank 11, 0 at rank 100)
//	otherwise:    0                (no relevant passage in the ranking)
//
// so a rewrite that moves a relevant passage into the top 10 gains a whole
// point more than one that leaves it just outside, and every move within
// the top 100 still earns something: the dense signal that Recall@10's 0/1
// steps lack.

// RankRewardDepth is the deepest rank that earns a rank reward (the
// authors retrieve top 100).
const RankRewardDepth = 100

// RankReward is ConvSearch-R1's rank-incentive reward of the first relevant
// passage's 1-based rank; rank ≤ 0 means no relevant passage was retrieved.
func RankReward(rank int) float64 {
	switch {
	case rank >= 1 && rank <= 10:
		return 2 - float64(rank-1)/9
	case rank > 10 && rank <= RankRewardDepth:
		return float64(RankRewardDepth-rank) / 90
	default:
		return 0
	}
}

// FirstRelevantRank is the 1-based position in ranking (passage ids, best
// first) of the first passage the judgments qrels (passage id → grade, as
// datasets.Turn.Qrels) call relevant (grade ≥ 1, trec_eval's rule), or 0
// when none is. Only judged passages count: an unjudged passage is not
// relevant, and callers must not ask for a turn without judgments (its 0
// would read as "nothing relevant retrieved").
func FirstRelevantRank(ranking []string, qrels map[string]int) int {
	for i, id := range ranking {
		if qrels[id] >= 1 {
			return i + 1
		}
	}
	return 0
}
