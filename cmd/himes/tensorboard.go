package main

import (
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/tbevent"
)

// tbTracker adapts tbevent.Run to grpo.Tracker.
type tbTracker struct{ *tbevent.Run }

func (t tbTracker) Scalars(step int, wall time.Time, values []grpo.Scalar) error {
	s := make([]tbevent.Scalar, len(values))
	for i, v := range values {
		s[i] = tbevent.Scalar{Tag: v.Name, Value: v.Value}
	}
	return t.Run.Scalars(step, wall, s)
}
