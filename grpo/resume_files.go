package grpo

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/rundir"
)

// MetricsCoverage is what a checkpoint records of metrics.jsonl: how many
// lines it covers and the sha256 of those lines' bytes, so a resume verifies
// the log it continues as it verifies the ledger files (issue 27, item 3).
type MetricsCoverage struct {
	Lines  int    `json:"lines"`
	SHA256 string `json:"sha256"`
}

// metricsMismatchError says that metrics.jsonl is not what a checkpoint saw.
type metricsMismatchError struct {
	path string
	step int
	msg  string
}

func (e *metricsMismatchError) Error() string {
	return fmt.Sprintf("%s: %s; the checkpoint of step %d covers the first lines of the log as it was then: "+
		"the log was changed after himes wrote it (restore it, or resume with --resume --repair to continue from "+
		"the newest checkpoint whose files are intact)", e.path, e.msg, e.step)
}

// coveredMetrics returns the first cov.Lines lines of the log at path when
// they are exactly the ones the checkpoint of step saw.
func coveredMetrics(path string, step int, cov *MetricsCoverage) ([]byte, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		b, err = nil, nil
		if cov.Lines > 0 {
			return nil, &metricsMismatchError{path, step, fmt.Sprintf("missing, but %d lines are covered", cov.Lines)}
		}
	}
	if err != nil {
		return nil, fmt.Errorf("read metrics log: %w", err)
	}
	end, n := 0, 0
	for n < cov.Lines {
		i := bytes.IndexByte(b[end:], '\n')
		if i < 0 {
			return nil, &metricsMismatchError{path, step, fmt.Sprintf("has %d complete lines, the checkpoint covers %d", n, cov.Lines)}
		}
		end += i + 1
		n++
	}
	sum := sha256.Sum256(b[:end])
	if got := hex.EncodeToString(sum[:]); got != cov.SHA256 {
		what := fmt.Sprintf("its first %d lines differ from those the checkpoint covers (sha256 %.12s…, recorded %.12s…)", cov.Lines, got, cov.SHA256)
		for i, line := range bytes.SplitAfter(b[:end], []byte("\n")) {
			if len(line) > 0 && !json.Valid(line) {
				what = fmt.Sprintf("line %d is not a metrics record, and %s", i+1, what)
				return nil, &metricsMismatchError{fmt.Sprintf("%s:%d", path, i+1), step, what}
			}
		}
		return nil, &metricsMismatchError{path, step, what}
	}
	return b[:end], nil
}

// openMetricsLog opens metrics.jsonl for the run to continue: with a
// checkpoint that records its coverage, exactly the lines it covers are kept
// (verified); covered is the checkpoint's step, -1 for none (older
// checkpoints without coverage keep the lines of steps up to it).
func (l *Loop) openMetricsLog(covered int) (*metricsLog, error) {
	path := l.deps.Run.File("metrics.jsonl")
	if cov := l.state.Metrics; cov != nil && covered >= 0 {
		kept, err := coveredMetrics(path, covered, cov)
		if err != nil {
			return nil, err
		}
		return appendMetrics(path, kept, true)
	}
	return openMetrics(path, covered, l.state.EvalDone, l.log)
}

// loadState reads the newest valid checkpoint before step before; with
// --repair a checkpoint whose ledger files are damaged is accepted, and the
// damaged files' names are returned.
func (l *Loop) loadState(before int) (State, int, []string, error) {
	if l.repair {
		return rundir.LoadStateRepair(l.deps.Run, before, validState)
	}
	st, step, err := rundir.LoadState(l.deps.Run, before, validState)
	return st, step, nil, err
}

// repairReport records what `--resume --repair` gave up, for the log and
// for repair-<generation>.json in the run directory.
type repairReport struct {
	// skipped: newer checkpoints passed over, and why.
	skipped []string
	// fallback is the newest checkpoint passed over for its metrics log,
	// used (with the log set aside) when no older one has an intact log.
	fallback *repairCandidate
	// damaged: ledger files set aside; metricsAside: the log set aside.
	damaged      []string
	metricsAside string
	bestLost     string
}

type repairCandidate struct {
	st      State
	step    int
	damaged []string
}

func (r *repairReport) skip(step int, why error, st State, damaged []string) {
	slog.Error("resume --repair: passing over a checkpoint whose files are damaged", "step", step, "error", why)
	r.skipped = append(r.skipped, fmt.Sprintf("step %d: %v", step, why))
	if r.fallback == nil {
		r.fallback = &repairCandidate{st, step, damaged}
	}
}

// setAsideMetrics moves the damaged metrics.jsonl aside: the run continues
// from st with a log that starts empty.
func (r *repairReport) setAsideMetrics(l *Loop, st *State) error {
	path := l.deps.Run.File("metrics.jsonl")
	aside := fmt.Sprintf("%s.damaged-%d", path, l.deps.Run.Generation())
	if err := os.Rename(path, aside); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("resume --repair: set aside %s: %w", path, err)
	}
	empty := sha256.Sum256(nil)
	st.Metrics = &MetricsCoverage{Lines: 0, SHA256: hex.EncodeToString(empty[:])}
	r.metricsAside = aside
	r.skipped = r.skipped[:0]
	return nil
}

// write logs what the repair lost and records it in the run directory;
// nothing when nothing was damaged.
func (r *repairReport) write(l *Loop, step int) error {
	if len(r.skipped) == 0 && len(r.damaged) == 0 && r.metricsAside == "" && r.bestLost == "" {
		return nil
	}
	var lost []string
	for _, name := range r.damaged {
		first, last, _ := rundir.ParseLedgerName(name)
		lost = append(lost, fmt.Sprintf("ledger rows of steps %d..%d (%s, set aside as %s.damaged)", first, last, name, name))
	}
	if r.metricsAside != "" {
		lost = append(lost, fmt.Sprintf("the metrics lines up to step %d (the damaged log is kept as %s; metrics.jsonl restarts after step %d)",
			step, r.metricsAside, step))
	}
	if len(r.skipped) > 0 {
		lost = append(lost, fmt.Sprintf("the training after step %d, which is redone", step))
	}
	if r.bestLost != "" {
		lost = append(lost, "the best checkpoint record: "+r.bestLost)
	}
	report := struct {
		ResumedStep int      `json:"resumed_step"`
		Skipped     []string `json:"skipped_checkpoints,omitempty"`
		Lost        []string `json:"lost"`
	}{step, r.skipped, lost}
	path := l.deps.Run.File(fmt.Sprintf("repair-%d.json", l.state.Generation))
	if err := atomicfile.WriteJSON(path, report); err != nil {
		return fmt.Errorf("resume --repair: write %s: %w", path, err)
	}
	l.log.Error("resume --repair: the run continues, but some of its record is lost", "resumed_step", step,
		"lost", strings.Join(lost, "; "), "report", path)
	return nil
}

// checkBestFile verifies state/best.json against the best checkpoint the
// resumed state records (item 2 of issue 27). A missing or damaged file is
// rebuilt, with a warning, from the step checkpoint of the best step, or
// from the state itself when it is the best; otherwise the resume stops,
// or with --repair forgets the best with a loud warning.
func (l *Loop) checkBestFile(st *State, rep *repairReport) error {
	want := st.Best
	if want == nil {
		return nil
	}
	var got State
	ok, err := l.deps.Run.LoadBestState(&got)
	if err == nil && ok && got.Best != nil && got.Best.Step == want.Step && got.TrainerCheckpoint == want.TrainerCheckpoint {
		return nil
	}
	problem := "missing"
	switch {
	case err != nil:
		problem = err.Error()
	case ok:
		problem = fmt.Sprintf("it records step %d, the checkpoint says the best is step %d", got.Step, want.Step)
	}
	var from State
	source := ""
	if _, step, err := rundir.LoadState(l.deps.Run, want.Step+1, validState); err == nil && step == want.Step {
		from, _, _ = rundir.LoadState(l.deps.Run, want.Step+1, validState)
		source = fmt.Sprintf("state/step-%06d.json", step)
	}
	if source == "" && st.Step == want.Step && st.TrainerCheckpoint == want.TrainerCheckpoint {
		from, source = *st, "the resumed checkpoint"
	}
	if source != "" && from.Best != nil && from.Best.Step == want.Step && from.TrainerCheckpoint == want.TrainerCheckpoint {
		if err := l.deps.Run.SaveBest(from); err != nil {
			return err
		}
		l.log.Warn("state/best.json was damaged: rebuilt", "problem", problem, "from", source, "best_step", want.Step)
		return nil
	}
	msg := fmt.Sprintf("%s (the best checkpoint, step %d): %s, and the state of step %d that could rebuild it is gone",
		l.deps.Run.File("state/best.json"), want.Step, problem, want.Step)
	if !l.repair {
		return fmt.Errorf("%s; resume with --resume --repair to forget the best checkpoint (the next evaluation sets a new one)", msg)
	}
	l.log.Error("resume --repair: forgetting the best checkpoint", "problem", msg)
	rep.bestLost = msg
	st.Best = nil
	return nil
}

// saveCheckpoint is checkpoint for the loop's scheduled saves: when SIGINT
// or SIGTERM cancels the save midway (the trainer call fails with the
// context), the interrupt handler redoes it with a fresh context, so an
// interrupt never leaves the step without the checkpoint it was saving
// (item 4 of issue 27).
func (l *Loop) saveCheckpoint(ctx context.Context, best *BestCheckpoint) error {
	err := l.checkpoint(ctx, best)
	if err != nil && ctx.Err() != nil {
		l.log.Warn("interrupted during a checkpoint: saving it again", "step", l.state.Step, "error", err)
		return l.interruptedSave(ctx, best)
	}
	return err
}
