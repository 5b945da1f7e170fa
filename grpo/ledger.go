package grpo

import (
	"github.com/himes-rl/himes/rollout"
)

// The rollout ledger, in files of several steps (ledger/steps-F-L.parquet).
//
// A completed step's records are appended to an in-memory chunk
// (rollout.LedgerChunk) after its update succeeded; the chunk is encoded and
// written atomically (rundir.WriteLedger: temporary file, fsync, rename)
// when it holds grpo.ledger_steps steps or ledgerChunkRows records, before
// every checkpoint, and when the run ends however it ends (short of a kill).
// So every file on disk is complete, each checkpoint covers whole files
// (its state records their sha256, checked on resume), and a kill loses
// only the steps of the open chunk, all after the last checkpoint, which
// --resume redoes; files of steps after the resumed checkpoint are set aside
// (rundir.Adopt). Writing per chunk instead of per step saves the encoder's
// fixed cost per file and column (~2 ms of CPU a step) and the fsync.

// ledgerChunkRows bounds the records a chunk holds in memory.
const ledgerChunkRows = 1 << 16

// appendLedger adds a completed step's records to the ledger and writes the
// chunk once it is full.
func (l *Loop) appendLedger(step int, records []rollout.Record) error {
	if l.ledger == nil {
		c, err := rollout.NewLedgerChunk()
		if err != nil {
			return err
		}
		l.ledger = c
	}
	if err := l.ledger.Append(step, records); err != nil {
		return err
	}
	if _, _, n := l.ledger.Steps(); n >= l.cfg.LedgerSteps || l.ledger.Rows() >= ledgerChunkRows {
		return l.flushLedger()
	}
	return nil
}

// flushLedger writes the steps the chunk holds as one ledger file (nothing
// when it holds none).
func (l *Loop) flushLedger() error {
	if l.ledger == nil {
		return nil
	}
	first, last, n := l.ledger.Steps()
	if n == 0 {
		return nil
	}
	data, err := l.ledger.Finish()
	if err != nil {
		return err
	}
	return l.deps.Run.WriteLedger(first, last, data) // "write ledger: ..." already
}
