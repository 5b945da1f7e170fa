package grpo

import (
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
	"github.com/himes-rl/himes/trainer"
)

// group is one prompt of a step: its G samples (tokens and logprobs, for
// the update) and their rollout records (rewards, for the advantages).
type group struct {
	index   int // position of the prompt in the step
	turn    datasets.Turn
	prompt  trainer.Prompt
	samples []trainer.Sample
	records []rollout.Record
	guards  guardCounts
}

// stepBatch is everything one step produced, in prompt order.
type stepBatch struct {
	step   int
	groups []group
	stats  rollout.Stats
	// greedy is each group's greedy rollout (greedyProbe), the baseline of
	// the greedy advantage estimator; nil when the step rolled none out.
	greedy []rlcore.SampleReward
}

func (b *stepBatch) sampleRewards() [][]rlcore.SampleReward {
	out := make([][]rlcore.SampleReward, len(b.groups))
	for i := range b.groups {
		out[i] = b.sampleGroup(i)
	}
	return out
}

// sampleGroup is group i's rewards as the advantage code sees them.
func (b *stepBatch) sampleGroup(i int) []rlcore.SampleReward {
	recs := b.groups[i].records
	out := make([]rlcore.SampleReward, len(recs))
	for k, r := range recs {
		out[k] = recordReward(r)
	}
	return out
}

// recordReward is one rollout's reward terms as the advantage code reads them.
func recordReward(r rollout.Record) rlcore.SampleReward {
	return sampleReward(!r.Failed(), recordScore(r), r.Guard != "", r.GuardPenalty)
}

// sampleReward is a rollout's reward terms as rlcore's advantages read them.
func sampleReward(valid bool, sc hser.Score, guarded bool, penalty float64) rlcore.SampleReward {
	return rlcore.SampleReward{Valid: valid, Guarded: guarded, GuardPenalty: penalty, Terms: RewardTerms(sc)}
}

// RewardTerms is a score's reward terms as rlcore reads them, the
// retrieval terms included (one mapping for the training loop and the
// ablations' re-scoring).
func RewardTerms(sc hser.Score) rlcore.Terms {
	return rlcore.Terms{RougeF1: sc.RougeF1, EM: sc.EM, Hit: sc.Hit, Rank: sc.RankReward, Recall: sc.RecallK, NDCG: sc.NDCGK, RR: sc.RR}
}

// RewardWeights is a reward config's weights as rlcore reads them: every
// term of R, the retrieval terms included.
func RewardWeights(c hser.Config) rlcore.Weights {
	return rlcore.Weights{RougeL: c.RougeL, Alpha: c.Alpha, Beta: c.Beta, Rank: c.Rank,
		Recall: c.Recall.Weight, NDCG: c.NDCG.Weight, RR: c.RR.Weight}
}

func (b *stepBatch) applyAdvantages(adv rlcore.Advantages) {
	for i := range b.groups {
		for k := range b.groups[i].records {
			b.groups[i].records[k].Advantage = adv.Values[i][k]
			b.groups[i].records[k].Included = adv.Include[i][k]
		}
	}
}

func (b *stepBatch) records() []rollout.Record {
	n := 0
	for _, g := range b.groups {
		n += len(g.records)
	}
	out := make([]rollout.Record, 0, n)
	for _, g := range b.groups {
		out = append(out, g.records...)
	}
	return out
}

// zeroVarianceGroups lists the prompt indices of groups that cannot teach
// anything under the advantage settings (teachesNothing).
func (b *stepBatch) zeroVarianceGroups(cfg rlcore.AdvantageConfig, w rlcore.Weights) []int {
	var idx []int
	for i, g := range b.groups {
		if rlcore.TeachesNothing(cfg, w, b.sampleGroup(i)) {
			idx = append(idx, g.index)
		}
	}
	return idx
}

// replaceWithVaried swaps in the re-sampled groups that now have reward
// variance and returns how many it swapped.
func (b *stepBatch) replaceWithVaried(cfg rlcore.AdvantageConfig, w rlcore.Weights, again *stepBatch) int {
	n := 0
	for k, ng := range again.groups {
		if rlcore.TeachesNothing(cfg, w, again.sampleGroup(k)) {
			continue
		}
		for i := range b.groups {
			if b.groups[i].index == ng.index {
				b.groups[i] = ng
				n++
			}
		}
	}
	b.stats = addStats(b.stats, again.stats)
	return n
}

func recordScore(r rollout.Record) hser.Score {
	return hser.Score{RougeP: r.RougeP, RougeR: r.RougeR, RougeF1: r.RougeF1, EM: r.EM, SquadEM: r.SquadEM, SquadF1: r.SquadF1,
		Hit: r.Hit, Alpha: r.Alpha, Beta: r.Beta, Reward: r.Reward,
		Judged: r.Judged, FirstRelevant: r.FirstRelevantRank, RankReward: r.RankReward, Gamma: r.Gamma,
		RecallK: r.RecallK, NDCGK: r.NDCGK, RR: r.RR}
}

func addStats(a, b rollout.Stats) rollout.Stats {
	a.Rollouts += b.Rollouts
	a.Failed += b.Failed
	a.ResponderCalls += b.ResponderCalls
	a.DedupHits += b.DedupHits
	a.CacheHits += b.CacheHits
	a.RetrieveSeconds += b.RetrieveSeconds
	a.RespondSeconds += b.RespondSeconds
	a.ScoreSeconds += b.ScoreSeconds
	a.RetrieveWall += b.RetrieveWall
	a.RespondWall += b.RespondWall
	a.ScoreWall += b.ScoreWall
	return a
}

// updateReport is what the trainer said about the step's update, and which
// of its numbers mean something: none when no update was sent, KL only when
// the loss has a KL term, entropy only when the endpoint computes it.
type updateReport struct {
	resp                    trainer.GRPOResponse
	sent, kl, entropy, dual bool
	// klMeasured: kl_coef is 0 and the endpoint measures the KL anyway.
	klMeasured bool
	// reset: the update reset the trainer's optimizer (grpo.optimizer.reset).
	reset bool
}

// stepMetrics summarizes a step for metrics.jsonl.
func stepMetrics(step, epoch int, b *stepBatch, adv rlcore.Advantages, upd updateReport, resampled int) StepMetrics {
	m := StepMetrics{Kind: "step", Step: step, Epoch: epoch, PolicyVersion: upd.resp.PolicyVersion,
		ResampledGroups: resampled, DedupHits: b.stats.DedupHits, CacheHits: b.stats.CacheHits,
		DroppedGroups: adv.Stats.DroppedGroups}
	if upd.sent {
		r := upd.resp
		m.Loss, m.ClipFracLow, m.ClipFracHigh, m.GradNorm = ptr(r.Loss), ptr(r.ClipFracLow), ptr(r.ClipFracHigh), ptr(r.GradNorm)
		if upd.dual {
			m.ClipFracDual = ptr(r.ClipFracDual)
		}
		if upd.kl {
			m.KL = ptr(r.KL)
		}
		if upd.entropy {
			m.Entropy = ptr(r.Entropy)
		}
		if upd.klMeasured {
			m.KLMeasured = ptr(r.KL)
		}
		m.WeightNorm, m.Bias = r.WeightNorm, r.Bias
		m.OptimizerReset = upd.reset
		// Advantages are included exactly when samples were sent.
		m.AdvantageMean, m.AdvantageStd, m.AdvantageAbsMean = ptr(adv.Stats.Mean), ptr(adv.Stats.Std), ptr(adv.Stats.AbsMean)
	}
	var rewards []float64
	var words float64
	var t Terms
	for _, g := range b.groups {
		m.GuardLeak += g.guards.leak
		m.GuardEmpty += g.guards.empty
		m.GuardTooLong += g.guards.tooLong
		m.GuardCopiesHistory += g.guards.copiesHistory
		for _, r := range g.records {
			m.Rollouts++
			words += float64(len(strings.Fields(r.Rewrite)))
			if r.Failed() {
				m.FailedRollouts++
				continue
			}
			rewards = append(rewards, r.Reward)
			t.RougeLF1 += r.RougeF1
			t.EM += r.EM
			t.Hit += r.Hit
			t.SquadEM += r.SquadEM
			t.SquadF1 += r.SquadF1
			t.GuardPenalty += r.GuardPenalty
		}
	}
	if n := float64(len(rewards)); n > 0 {
		mean, std := stats.MeanStd(rewards, false)
		m.RewardMean, m.RewardStd = ptr(mean), ptr(std)
		t.Reward = mean
		t.RougeLF1 /= n
		t.EM /= n
		t.Hit /= n
		t.SquadEM /= n
		t.SquadF1 /= n
		t.GuardPenalty /= n
		m.Terms = &t
	}
	if m.Rollouts > 0 {
		m.RewriteLenMean = words / float64(m.Rollouts)
	}
	if g := float64(adv.Stats.ComparableGroups); g > 0 {
		m.ZeroVarFrac = ptr(float64(adv.Stats.ZeroVarGroups) / g)
		m.ZeroVarFracRougeL = ptr(float64(adv.Stats.ZeroVarRougeL) / g)
		m.ZeroVarFracEM = ptr(float64(adv.Stats.ZeroVarEM) / g)
		m.ZeroVarFracHit = ptr(float64(adv.Stats.ZeroVarHit) / g)
	}
	return m
}

// addRetrieval sets the means of the retrieval terms that enter R over the
// step's valid judged rollouts (a nil t: no valid rollout, nothing to add).
func (t *Terms) addRetrieval(b *stepBatch, c hser.Config) {
	if t == nil {
		return
	}
	var n, rank, recall, ndcg, rr float64
	for _, g := range b.groups {
		for _, r := range g.records {
			if r.Failed() || !r.Judged {
				continue
			}
			n++
			rank += r.RankReward
			recall += r.RecallK
			ndcg += r.NDCGK
			rr += r.RR
		}
	}
	if n == 0 {
		return
	}
	for _, x := range []struct {
		w   float64
		sum float64
		dst **float64
	}{{c.Rank, rank, &t.RankReward}, {c.Recall.Weight, recall, &t.RecallK}, {c.NDCG.Weight, ndcg, &t.NDCGK}, {c.RR.Weight, rr, &t.RR}} {
		if x.w != 0 {
			*x.dst = ptr(x.sum / n)
		}
	}
}
