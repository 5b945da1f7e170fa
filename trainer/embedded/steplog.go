package embedded

import (
	"crypto/sha256"
	"encoding/json"
	"fmt"

	"github.com/himes-rl/himes/trainer"
)

// stepLog remembers the results of applied mutating calls by step_id, so a
// repeated call is answered from the log instead of being applied again. It
// holds the most recent cap entries (FIFO eviction). Not safe for concurrent
// use: the Policy's lock guards it together with the state it protects.
type stepLog struct {
	cap   int
	m     map[string]stepEntry
	order []string
}

type stepEntry struct {
	op     string
	hash   [32]byte
	result any
}

func newStepLog(capacity int) *stepLog {
	return &stepLog{cap: capacity, m: make(map[string]stepEntry)}
}

// requestHash is the canonical hash of a request body without its step_id.
func requestHash(req any) ([32]byte, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return [32]byte{}, fmt.Errorf("hash request: %w", err)
	}
	return sha256.Sum256(b), nil
}

// lookup returns the stored result of id, nil if none, or a conflict error
// when id was used for another call.
func (l *stepLog) lookup(id, op string, hash [32]byte) (any, *trainer.Error) {
	e, ok := l.m[id]
	if !ok {
		return nil, nil
	}
	if e.op != op {
		return nil, trainer.NewError(trainer.CodeConflict, "step_id %q was already used for %s, not %s", id, e.op, op)
	}
	if e.hash != hash {
		return nil, trainer.NewError(trainer.CodeConflict, "step_id %q was already used for a different %s request", id, op)
	}
	return e.result, nil
}

func (l *stepLog) store(id, op string, hash [32]byte, result any) {
	if _, ok := l.m[id]; !ok {
		l.order = append(l.order, id)
	}
	l.m[id] = stepEntry{op: op, hash: hash, result: result}
	for len(l.order) > l.cap {
		delete(l.m, l.order[0])
		l.order = l.order[1:]
	}
}

func checkStepID(id string) *trainer.Error {
	if id == "" {
		return trainer.Invalidf("step_id: is required on every mutating call")
	}
	if len(id) > 256 {
		return trainer.Invalidf("step_id: %d bytes, at most 256", len(id))
	}
	return nil
}
