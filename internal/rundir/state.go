package rundir

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// stateFormat identifies harness state files.
const stateFormat = "himes-state/1"

// stateFile is the on-disk form of a harness checkpoint. SHA256 covers the
// state and the checksums of the ledgers it covers (see stateSum), so a hand
// edit, a truncated file or a damaged ledger makes the checkpoint invalid
// instead of silently resuming from it.
type stateFile struct {
	Format string `json:"format"`
	SHA256 string `json:"sha256"`
	// Ledgers maps the ledger files of the steps up to this one (names under
	// ledger/) to their sha256.
	Ledgers map[string]string `json:"ledgers"`
	State   json.RawMessage   `json:"state"`
}

// stateSum is the checksum a state file records: sha256 over the format,
// the state's compact JSON and the sorted "name sha256" ledger lines.
func stateSum(format string, state []byte, ledgers map[string]string) (string, error) {
	h := sha256.New()
	var compact bytes.Buffer
	if err := json.Compact(&compact, state); err != nil {
		return "", err
	}
	names := make([]string, 0, len(ledgers))
	for n := range ledgers {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintf(h, "%s\n%s\n", format, compact.Bytes())
	for _, n := range names {
		fmt.Fprintf(h, "%s %s\n", n, ledgers[n])
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// statePath is the harness checkpoint after a step.
func (r *RunDir) statePath(step int) string {
	return filepath.Join(r.Path, "state", fmt.Sprintf("step-%06d.json", step))
}

// SaveState writes the harness state after step atomically, with the
// checksums of the ledgers of steps 1..step, then keeps only the newest keep
// checkpoints (keep ≤ 0 keeps all) and returns the steps whose checkpoints
// it removed, so the caller can release what they named.
func (r *RunDir) SaveState(step int, state any, keep int) (pruned []int, err error) {
	if err := r.checkStateDir(); err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	raw, err := json.Marshal(state)
	if err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	ledgers, err := r.coveredLedgers(step)
	if err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	sum, err := stateSum(stateFormat, raw, ledgers)
	if err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	f := stateFile{Format: stateFormat, SHA256: sum, Ledgers: ledgers, State: raw}
	if err := atomicfile.WriteJSON(r.statePath(step), f); err != nil {
		return nil, fmt.Errorf("save harness state: %w", err)
	}
	if keep <= 0 {
		return nil, nil
	}
	steps, err := r.StateSteps()
	if err != nil {
		return nil, err
	}
	for len(steps) > keep {
		p := r.statePath(steps[0])
		if fi, err := os.Lstat(p); err == nil && !fi.Mode().IsRegular() {
			// Never delete through a link (or anything but a file himes wrote).
			slog.Warn("retention: not a regular file, left alone", "path", p)
		} else if err := os.Remove(p); err != nil {
			return pruned, fmt.Errorf("retention: %w", err)
		} else {
			pruned = append(pruned, steps[0])
		}
		steps = steps[1:]
	}
	return pruned, nil
}

// checkStateDir refuses a state/ that is a symbolic link: files are written
// and deleted there, and must stay inside the run directory.
func (r *RunDir) checkStateDir() error {
	p := filepath.Join(r.Path, "state")
	fi, err := os.Lstat(p)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return fmt.Errorf("%s is a symbolic link or not a directory; himes never follows links there", p)
	}
	return nil
}

func fileSum(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// StateSteps lists the steps that have a saved harness state, ascending.
func (r *RunDir) StateSteps() ([]int, error) {
	entries, err := os.ReadDir(filepath.Join(r.Path, "state"))
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	var steps []int
	for _, e := range entries {
		n := e.Name()
		if !strings.HasPrefix(n, "step-") || !strings.HasSuffix(n, ".json") {
			continue // temporary files of an interrupted write, set-aside checkpoints
		}
		s, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(n, "step-"), ".json"))
		if err == nil {
			steps = append(steps, s)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// LoadState decodes the newest valid harness state of a step before
// `before` (math.MaxInt: any) and returns it with its step. A checkpoint is
// valid when its checksum matches, the ledgers it covers are unchanged, and
// check (the caller's field validation; nil for none) accepts it. Invalid
// newer checkpoints are skipped with a warning naming each and why. Step is
// -1 with a nil error only when there is no checkpoint at all; when all are
// invalid the error lists every reason. LoadState changes no file: call Adopt
// once the state is in use.
func LoadState[T any](r *RunDir, before int, check func(step int, st *T) error) (T, int, error) {
	st, step, _, err := loadState(r, before, check, false)
	return st, step, err
}

// LoadStateRepair is LoadState for `--resume --repair`: a checkpoint whose
// own file is intact is accepted even when ledger files it covers are
// damaged or missing; their names come back in damaged, for the caller to
// set aside (SetAsideDamagedLedgers) and report as lost.
func LoadStateRepair[T any](r *RunDir, before int, check func(step int, st *T) error) (T, int, []string, error) {
	return loadState(r, before, check, true)
}

func loadState[T any](r *RunDir, before int, check func(step int, st *T) error, tolerate bool) (T, int, []string, error) {
	var zero T
	steps, err := r.StateSteps()
	if err != nil {
		return zero, -1, nil, err
	}
	var skipped []string
	for i := len(steps) - 1; i >= 0; i-- {
		step := steps[i]
		if step >= before {
			continue
		}
		var st T
		ledgers, damaged, err := r.readState(step, &st, tolerate)
		if err == nil && check != nil {
			err = check(step, &st)
		}
		if err != nil {
			slog.Warn("checkpoint is invalid, trying the one before it", "path", r.statePath(step), "error", err)
			skipped = append(skipped, fmt.Sprintf("step %d: %v", step, err))
			continue
		}
		if len(skipped) > 0 {
			slog.Warn("resuming from an older checkpoint", "step", step, "path", r.statePath(step), "skipped", len(skipped))
		}
		r.ledgers = ledgers
		return st, step, damaged, nil
	}
	if len(skipped) > 0 {
		hint := ""
		if !tolerate {
			hint = " (if only ledger files are damaged, `himes train --resume --repair` continues from the newest checkpoint and sets them aside, reporting the steps whose rollouts are lost)"
		}
		return zero, -1, nil, fmt.Errorf("no valid checkpoint in %s: %s%s", filepath.Join(r.Path, "state"), strings.Join(skipped, "; "), hint)
	}
	return zero, -1, nil, nil
}

// SetAsideDamagedLedgers renames the named ledger files (damaged, see
// LoadStateRepair) to NAME.damaged, so that no checkpoint covers them and no
// reader counts their rows; a missing one is only forgotten.
func (r *RunDir) SetAsideDamagedLedgers(names []string) error {
	for _, name := range names {
		delete(r.ledgers, name)
		p := r.ledgerPath(name)
		if err := os.Rename(p, p+".damaged"); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("set aside damaged ledger: %w", err)
		}
	}
	return nil
}

// readState verifies the state file of step and decodes its state into v,
// returning the ledger checksums it covers by file name.
func (r *RunDir) readState(step int, v any, tolerate bool) (map[string]string, []string, error) {
	path := r.statePath(step)
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, fmt.Errorf("read checkpoint: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s is corrupt: %w", path, err)
	}
	if f.Format != stateFormat {
		return nil, nil, fmt.Errorf("checkpoint %s: field format is %q, want %q (no checksum: damaged, or written by an older himes)", path, f.Format, stateFormat)
	}
	if len(f.State) == 0 {
		return nil, nil, fmt.Errorf("checkpoint %s: field state is missing", path)
	}
	sum, err := stateSum(f.Format, f.State, f.Ledgers)
	if err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: field state: %w", path, err)
	}
	if sum != f.SHA256 {
		return nil, nil, fmt.Errorf("checkpoint %s: checksum mismatch (recorded %.12s…, content %.12s…): the file was changed after himes wrote it", path, f.SHA256, sum)
	}
	ledgers := map[string]string{}
	var damaged []string
	for name, want := range f.Ledgers {
		if _, last, ok := ParseLedgerName(name); !ok || last > step {
			return nil, nil, fmt.Errorf("checkpoint %s: field ledgers: unexpected entry %q", path, name)
		}
		got, err := fileSum(r.ledgerPath(name))
		if tolerate && (err != nil || got != want) {
			damaged = append(damaged, name)
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("ledger %s, which checkpoint %s covers: %w", name, path, err)
		}
		if got != want {
			return nil, nil, fmt.Errorf("ledger %s changed after checkpoint %s covered it (sha256 %.12s…, recorded %.12s…)", r.ledgerPath(name), path, got, want)
		}
		ledgers[name] = got
	}
	if err := json.Unmarshal(f.State, v); err != nil {
		return nil, nil, fmt.Errorf("checkpoint %s: field state: %w", path, err)
	}
	sort.Strings(damaged)
	return ledgers, damaged, nil
}

// Adopt makes the checkpoint of step the run's current one: the checkpoints
// after it (invalid, or superseded because the run continues from an older
// one) are set aside as step-N.json.invalid, so neither retention nor a later
// resume mistakes them for the run's state, and the ledgers of the steps
// after it as NAME.stale, so no reader counts a step twice once the run
// writes it again. Nothing is deleted. Adopt(0) with no checkpoint at all
// sets aside every ledger (a run that starts over).
func (r *RunDir) Adopt(step int) error {
	if err := r.setAsideLedgers(step); err != nil {
		return err
	}
	steps, err := r.StateSteps()
	if err != nil {
		return err
	}
	for _, s := range steps {
		if s <= step {
			continue
		}
		p := r.statePath(s)
		if err := os.Rename(p, p+".invalid"); err != nil {
			return fmt.Errorf("set aside checkpoint: %w", err)
		}
		slog.Warn("checkpoint set aside: the run continues from an older one", "path", p+".invalid", "resumed_step", step)
	}
	return nil
}

// bestPath holds a copy of the harness state of the best checkpoint; its
// name does not match step-*.json, so the rotation never counts or removes it.
func (r *RunDir) bestPath() string { return filepath.Join(r.Path, "state", "best.json") }

// SaveBest writes the harness state of the best checkpoint atomically, with
// its checksum (the ledgers are covered by the step checkpoints).
func (r *RunDir) SaveBest(state any) error {
	if err := r.checkStateDir(); err != nil {
		return fmt.Errorf("save best checkpoint state: %w", err)
	}
	raw, err := json.Marshal(state)
	if err != nil {
		return fmt.Errorf("save best checkpoint state: %w", err)
	}
	sum, err := stateSum(stateFormat, raw, nil)
	if err != nil {
		return fmt.Errorf("save best checkpoint state: %w", err)
	}
	if err := atomicfile.WriteJSON(r.bestPath(), stateFile{Format: stateFormat, SHA256: sum, State: raw}); err != nil {
		return fmt.Errorf("save best checkpoint state: %w", err)
	}
	return nil
}

// LoadBestState verifies the best checkpoint's harness state and decodes it
// into v; false when the run has none.
func (r *RunDir) LoadBestState(v any) (bool, error) {
	path := r.bestPath()
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read best checkpoint: %w", err)
	}
	var f stateFile
	if err := json.Unmarshal(b, &f); err != nil {
		return false, fmt.Errorf("best checkpoint %s is corrupt: %w", path, err)
	}
	if f.Format != stateFormat || len(f.State) == 0 {
		return false, fmt.Errorf("best checkpoint %s: field format is %q, want %q with a state", path, f.Format, stateFormat)
	}
	sum, err := stateSum(f.Format, f.State, f.Ledgers)
	if err != nil || sum != f.SHA256 {
		return false, fmt.Errorf("best checkpoint %s: checksum mismatch: the file was changed after himes wrote it", path)
	}
	if err := json.Unmarshal(f.State, v); err != nil {
		return false, fmt.Errorf("best checkpoint %s: field state: %w", path, err)
	}
	return true, nil
}
