package grpo

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"log/slog"
	"os"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// metricsLog appends JSON lines to metrics.jsonl.
type metricsLog struct {
	f    *os.File
	path string
	// lines and sum cover everything in the file: a checkpoint records
	// them (coverage), so a resume can verify the log it continues.
	lines int
	sum   hash.Hash
}

// openMetrics opens metrics.jsonl for appending. On resume it first keeps
// only the lines the checkpoint covers (steps ≤ step; the evaluation at step
// only if it was done), so a resumed run's log equals an uninterrupted one.
// Only a torn last line (a crash mid-write) is cut, with a warning; any other
// line that does not parse is an error naming the file and line.
func openMetrics(path string, step int, evalDone bool, log *slog.Logger) (*metricsLog, error) {
	if b, err := os.ReadFile(path); err == nil {
		var kept bytes.Buffer
		lines := bytes.SplitAfter(b, []byte("\n"))
		if len(lines[len(lines)-1]) == 0 {
			lines = lines[:len(lines)-1]
		}
		for i, line := range lines {
			var head struct {
				Kind  string `json:"kind"`
				Step  int    `json:"step"`
				Phase string `json:"phase"`
			}
			if err := json.Unmarshal(line, &head); err != nil {
				if i == len(lines)-1 {
					log.Warn("metrics log: cutting a torn last line", "file", path, "line", i+1, "bytes", len(line))
					continue
				}
				return nil, fmt.Errorf("%s:%d: not a metrics record (only a torn last line may be cut): %w", path, i+1, err)
			}
			// The "init" evaluation precedes the SFT phase, which the step-0
			// checkpoint already covers.
			keep := head.Step < step || (head.Step == step && (head.Kind != "eval" || evalDone || head.Phase == "init"))
			if keep {
				kept.Write(bytes.TrimSuffix(line, []byte("\n")))
				kept.WriteByte('\n')
			}
		}
		return appendMetrics(path, kept.Bytes(), true)
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("read metrics log: %w", err)
	}
	return appendMetrics(path, nil, false)
}

// appendMetrics opens the log for appending after its first lines kept
// (rewritten first when rewrite is set), counting and hashing them.
func appendMetrics(path string, kept []byte, rewrite bool) (*metricsLog, error) {
	if rewrite {
		if err := atomicfile.WriteFile(path, kept, 0o644); err != nil {
			return nil, fmt.Errorf("truncate metrics log: %w", err)
		}
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open metrics log: %w", err)
	}
	m := &metricsLog{f: f, path: path, sum: sha256.New(), lines: bytes.Count(kept, []byte("\n"))}
	m.sum.Write(kept)
	return m, nil
}

// coverage is what a checkpoint records of the log: its lines so far.
func (m *metricsLog) coverage() *MetricsCoverage {
	return &MetricsCoverage{Lines: m.lines, SHA256: hex.EncodeToString(m.sum.Sum(nil))}
}

// Write appends one JSON line in a single write, so a crash cuts at most
// the last line.
func (m *metricsLog) Write(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		if key, f := nonFinite(v); key != "" {
			return fmt.Errorf("encode metrics: %s is %v, the run has diverged (a learning rate or loss setting too large for the data, or a trainer returning a non-finite value); the run stops and its last checkpoint is intact: %w", key, f, err)
		}
		return fmt.Errorf("encode metrics: %w", err)
	}
	b = append(b, '\n')
	if _, err := m.f.Write(b); err != nil {
		return fmt.Errorf("write %s: %w", m.path, err)
	}
	m.lines++
	m.sum.Write(b)
	return nil
}

// Sync flushes the log to disk (before a checkpoint refers to it).
func (m *metricsLog) Sync() error {
	if err := m.f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", m.path, err)
	}
	return nil
}

func (m *metricsLog) Close() error { return m.f.Close() }
