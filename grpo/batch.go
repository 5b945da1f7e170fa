package grpo

import (
	"math"
	"strings"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
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
}

func (b *stepBatch) sampleRewards() [][]SampleReward {
	out := make([][]SampleReward, len(b.groups))
	for i, g := range b.groups {
		out[i] = make([]SampleReward, len(g.records))
		for k, r := range g.records {
			out[i][k] = SampleReward{Valid: !r.Failed(), Score: recordScore(r), Guarded: r.Guard != "", GuardPenalty: r.GuardPenalty}
		}
	}
	return out
}

func (b *stepBatch) applyAdvantages(adv Advantages) {
	for i := range b.groups {
		for k := range b.groups[i].records {
			b.groups[i].records[k].Advantage = adv.Values[i][k]
			b.groups[i].records[k].Included = adv.Include[i][k]
		}
	}
}

func (b *stepBatch) records() []rollout.Record {
	var out []rollout.Record
	for _, g := range b.groups {
		out = append(out, g.records...)
	}
	return out
}

// zeroVarianceGroups lists the prompt indices of groups that cannot teach
// anything: fewer than two valid rollouts, or all rewards equal.
func (b *stepBatch) zeroVarianceGroups() []int {
	var idx []int
	for _, g := range b.groups {
		if !hasVariance(g.records) {
			idx = append(idx, g.index)
		}
	}
	return idx
}

// replaceWithVaried swaps in the re-sampled groups that now have reward
// variance and returns how many it swapped.
func (b *stepBatch) replaceWithVaried(again *stepBatch) int {
	n := 0
	for _, ng := range again.groups {
		if !hasVariance(ng.records) {
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

func hasVariance(recs []rollout.Record) bool {
	first, valid := 0.0, 0
	for _, r := range recs {
		if r.Failed() {
			continue
		}
		if valid == 0 {
			first = r.Reward
		} else if r.Reward != first {
			return true
		}
		valid++
	}
	return false
}

func recordScore(r rollout.Record) hser.Score {
	return hser.Score{RougeP: r.RougeP, RougeR: r.RougeR, RougeF1: r.RougeF1, EM: r.EM, SquadEM: r.SquadEM, SquadF1: r.SquadF1,
		Hit: r.Hit, Alpha: r.Alpha, Beta: r.Beta, Reward: r.Reward}
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
	return a
}

// stepMetrics summarizes a step for metrics.jsonl.
func stepMetrics(step, epoch int, b *stepBatch, adv Advantages, upd trainer.GRPOResponse, resampled int) StepMetrics {
	m := StepMetrics{Kind: "step", Step: step, Epoch: epoch, PolicyVersion: upd.PolicyVersion,
		ResampledGroups: resampled, Loss: upd.Loss, KL: upd.KL, ClipFracLow: upd.ClipFracLow,
		ClipFracHigh: upd.ClipFracHigh, ClipFracDual: upd.ClipFracDual, GradNorm: upd.GradNorm, Entropy: upd.Entropy,
		DedupHits: b.stats.DedupHits, CacheHits: b.stats.CacheHits,
		AdvantageMean: adv.Stats.Mean, AdvantageStd: adv.Stats.Std, AdvantageAbsMean: adv.Stats.AbsMean,
		DroppedGroups: adv.Stats.DroppedGroups}
	var rewards []float64
	var words float64
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
			m.Terms.RougeLF1 += r.RougeF1
			m.Terms.EM += r.EM
			m.Terms.Hit += r.Hit
			m.Terms.SquadEM += r.SquadEM
			m.Terms.SquadF1 += r.SquadF1
			m.Terms.GuardPenalty += r.GuardPenalty
		}
	}
	if n := float64(len(rewards)); n > 0 {
		m.RewardMean, m.RewardStd = meanStd(rewards)
		m.Terms.Reward = m.RewardMean
		m.Terms.RougeLF1 /= n
		m.Terms.EM /= n
		m.Terms.Hit /= n
		m.Terms.SquadEM /= n
		m.Terms.SquadF1 /= n
		m.Terms.GuardPenalty /= n
	}
	if m.Rollouts > 0 {
		m.RewriteLenMean = words / float64(m.Rollouts)
	}
	if g := float64(adv.Stats.ComparableGroups); g > 0 {
		m.ZeroVarFrac = float64(adv.Stats.ZeroVarGroups) / g
		m.ZeroVarFracRougeL = float64(adv.Stats.ZeroVarRougeL) / g
		m.ZeroVarFracEM = float64(adv.Stats.ZeroVarEM) / g
		m.ZeroVarFracHit = float64(adv.Stats.ZeroVarHit) / g
	}
	return m
}

// meanStd returns the mean and population standard deviation.
func meanStd(xs []float64) (mean, std float64) {
	for _, x := range xs {
		mean += x
	}
	mean /= float64(len(xs))
	for _, x := range xs {
		std += (x - mean) * (x - mean)
	}
	return mean, math.Sqrt(std / float64(len(xs)))
}
