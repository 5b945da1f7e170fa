package grpo

import (
	"time"

	"github.com/himes-rl/himes/rollout"
)

// stageTimes is where a step's time went. sample, retrieve, respond, score
// and update are wall-clock shares of the step, taken one after the other
// (retrieve, respond and score are the rollout runner's phases, score also
// the advantages), so with other (the rest: prompts, guards, ledger,
// metrics) they add up to total. The *Sum fields are the rollout stages
// summed over concurrent rollouts: the work done, which can exceed the
// step's wall time.
type stageTimes struct {
	sample, retrieve, respond, score, update, total time.Duration
	retrieveSum, respondSum, scoreSum               time.Duration
}

func secs(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

// addRollouts adds a rollout runner's Run: its phases' wall-clock times
// and its summed per-rollout times.
func (s *stageTimes) addRollouts(st rollout.Stats) {
	s.retrieve += secs(st.RetrieveWall)
	s.respond += secs(st.RespondWall)
	s.score += secs(st.ScoreWall)
	s.retrieveSum += secs(st.RetrieveSeconds)
	s.respondSum += secs(st.RespondSeconds)
	s.scoreSum += secs(st.ScoreSeconds)
}

func (s stageTimes) fill(m *StepMetrics) {
	m.SampleSeconds = s.sample.Seconds()
	m.RetrieveSeconds = s.retrieve.Seconds()
	m.RespondSeconds = s.respond.Seconds()
	m.ScoreSeconds = s.score.Seconds()
	m.UpdateSeconds = s.update.Seconds()
	m.StepSeconds = s.total.Seconds()
	m.OtherSeconds = max(0, (s.total - s.sample - s.retrieve - s.respond - s.score - s.update).Seconds())
	m.RetrieveSumSeconds = s.retrieveSum.Seconds()
	m.RespondSumSeconds = s.respondSum.Seconds()
	m.ScoreSumSeconds = s.scoreSum.Seconds()
}
