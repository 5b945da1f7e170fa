package grpo

import "time"

// stageTimes is where a step's time went (summed over concurrent rollouts
// for retrieve, respond and score, so they can exceed the step's wall time).
type stageTimes struct {
	sample, retrieve, respond, score, update, total time.Duration
}

func (s stageTimes) fill(m *StepMetrics) {
	m.SampleSeconds = s.sample.Seconds()
	m.RetrieveSeconds = s.retrieve.Seconds()
	m.RespondSeconds = s.respond.Seconds()
	m.ScoreSeconds = s.score.Seconds()
	m.UpdateSeconds = s.update.Seconds()
	m.StepSeconds = s.total.Seconds()
}
