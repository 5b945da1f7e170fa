package grpo

import (
	"math"
	"testing"
	"time"

	"github.com/himes-rl/himes/rollout"
)

// The wall-clock shares add up to the step; the sums over rollouts are
// reported apart and may exceed it.
func TestStageTimesAddUpToTheStep(t *testing.T) {
	var s stageTimes
	s.sample = 100 * time.Millisecond
	// two runner calls (the step's rollouts and a greedy probe)
	s.addRollouts(rollout.Stats{RetrieveWall: 0.05, RespondWall: 0.2, ScoreWall: 0.01,
		RetrieveSeconds: 0.4, RespondSeconds: 1.6, ScoreSeconds: 0.08})
	s.addRollouts(rollout.Stats{RetrieveWall: 0.02, RespondWall: 0.1, ScoreWall: 0.01,
		RetrieveSeconds: 0.02, RespondSeconds: 0.1, ScoreSeconds: 0.01})
	s.score += 30 * time.Millisecond // advantages
	s.update = 400 * time.Millisecond
	s.total = time.Second
	var m StepMetrics
	s.fill(&m)
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-9 {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("t_retrieve_s", m.RetrieveSeconds, 0.07)
	near("t_respond_s", m.RespondSeconds, 0.3)
	near("t_score_s", m.ScoreSeconds, 0.05)
	near("t_other_s", m.OtherSeconds, 1-0.1-0.07-0.3-0.05-0.4)
	near("shares", m.SampleSeconds+m.RetrieveSeconds+m.RespondSeconds+m.ScoreSeconds+m.UpdateSeconds+m.OtherSeconds, m.StepSeconds)
	near("t_retrieve_sum_s", m.RetrieveSumSeconds, 0.42)
	near("t_respond_sum_s", m.RespondSumSeconds, 1.7)
	near("t_score_sum_s", m.ScoreSumSeconds, 0.09)
}
