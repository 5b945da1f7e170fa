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
			out[i][k] = SampleReward{Valid: !r.Failed(), Score: recordScore(r)}
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
	return hser.Score{RougeP: r.RougeP, RougeR: r.RougeR, RougeF1: r.RougeF1, EM: r.EM, SquadF1: r.SquadF1,
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

// updateReport is what the trainer said about the step's update, and which
// of its numbers mean something: none when no update was sent, KL only when
// the loss has a KL term, entropy only when the endpoint computes it.
type updateReport struct {
	resp              trainer.GRPOResponse
	sent, kl, entropy bool
}

// stepMetrics summarizes a step for metrics.jsonl.
func stepMetrics(step, epoch int, b *stepBatch, adv Advantages, upd updateReport, resampled int) StepMetrics {
	m := StepMetrics{Kind: "step", Step: step, Epoch: epoch, PolicyVersion: upd.resp.PolicyVersion,
		ResampledGroups: resampled, DedupHits: b.stats.DedupHits, CacheHits: b.stats.CacheHits,
		DroppedGroups: adv.Stats.DroppedGroups}
	if upd.sent {
		r := upd.resp
		m.Loss, m.ClipFracLow, m.ClipFracHigh, m.GradNorm = ptr(r.Loss), ptr(r.ClipFracLow), ptr(r.ClipFracHigh), ptr(r.GradNorm)
		if upd.kl {
			m.KL = ptr(r.KL)
		}
		if upd.entropy {
			m.Entropy = ptr(r.Entropy)
		}
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
			t.SquadF1 += r.SquadF1
		}
	}
	if n := float64(len(rewards)); n > 0 {
		mean, std := meanStd(rewards)
		m.RewardMean, m.RewardStd = ptr(mean), ptr(std)
		t.Reward = mean
		t.RougeLF1 /= n
		t.EM /= n
		t.Hit /= n
		t.SquadF1 /= n
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
