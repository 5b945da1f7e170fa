package rollout

import "github.com/himes-rl/himes/hser"

// setScore copies every reward term of s into the record.
func setScore(rec *Record, s hser.Score) {
	rec.RougeP, rec.RougeR, rec.RougeF1 = s.RougeP, s.RougeR, s.RougeF1
	rec.EM, rec.SquadEM, rec.SquadF1, rec.Hit = s.EM, s.SquadEM, s.SquadF1, s.Hit
	rec.Alpha, rec.Beta, rec.Reward = s.Alpha, s.Beta, s.Reward
}
