package rundir

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// Ledger files. ledger/steps-FFFFFF-LLLLLL.parquet holds the rollouts of
// steps F..L, complete: the training loop encodes a chunk of steps in memory
// and writes it here atomically (WriteLedger), so a file under such a name
// is never torn. ledger/step-NNNNNN.parquet is the one-step file of an older
// himes; both are read and verified alike. Files of steps after the
// checkpoint a resume continues from are set aside as NAME.stale (Adopt):
// the resumed run writes those steps again.

const ledgerDir = "ledger"

// LedgerName is the file name of the ledger of steps first..last.
func LedgerName(first, last int) string {
	return fmt.Sprintf("steps-%06d-%06d.parquet", first, last)
}

// ParseLedgerName returns the steps a ledger file name covers; ok is false
// for a name that is not a ledger's (temporary and set-aside files).
func ParseLedgerName(name string) (first, last int, ok bool) {
	if _, err := fmt.Sscanf(name, "steps-%06d-%06d.parquet", &first, &last); err == nil &&
		LedgerName(first, last) == name && 1 <= first && first <= last {
		return first, last, true
	}
	if _, err := fmt.Sscanf(name, "step-%06d.parquet", &first); err == nil &&
		fmt.Sprintf("step-%06d.parquet", first) == name && first >= 1 {
		return first, first, true
	}
	return 0, 0, false
}

// LedgerFile is one ledger file of a run.
type LedgerFile struct {
	Path        string
	First, Last int // the steps it holds
}

// LedgerFiles lists the ledger files of the run in runDir by step. Files
// whose steps overlap are refused: a reader would count those rollouts twice.
func LedgerFiles(runDir string) ([]LedgerFile, error) {
	dir := filepath.Join(runDir, ledgerDir)
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list ledgers: %w", err)
	}
	var out []LedgerFile
	for _, e := range entries {
		if first, last, ok := ParseLedgerName(e.Name()); ok && e.Type().IsRegular() {
			out = append(out, LedgerFile{Path: filepath.Join(dir, e.Name()), First: first, Last: last})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].First < out[j].First })
	for i := 1; i < len(out); i++ {
		if out[i].First <= out[i-1].Last {
			return nil, fmt.Errorf("ledgers %s and %s hold the same steps (%d): move one away", out[i-1].Path, out[i].Path, out[i].First)
		}
	}
	return out, nil
}

// LedgerFile is the path of the ledger of steps first..last.
func (r *RunDir) LedgerFile(first, last int) string {
	return filepath.Join(r.Path, ledgerDir, LedgerName(first, last))
}

// WriteLedger writes the encoded ledger of steps first..last atomically and
// durably, and records its checksum for the states that will cover it (so
// the file is not read back to hash it).
func (r *RunDir) WriteLedger(first, last int, data []byte) error {
	if first < 1 || last < first {
		return fmt.Errorf("write ledger: steps %d..%d", first, last)
	}
	if err := atomicfile.WriteFile(r.LedgerFile(first, last), data, 0o644); err != nil {
		return fmt.Errorf("write ledger: %w", err)
	}
	sum := sha256.Sum256(data)
	if r.ledgers == nil {
		r.ledgers = map[string]string{}
	}
	r.ledgers[LedgerName(first, last)] = hex.EncodeToString(sum[:])
	return nil
}

// coveredLedgers returns the checksums of the ledgers of steps up to step,
// by file name: those this process wrote or the adopted state covers, and
// any other ledger file in the directory (hashed once). A file that holds
// steps on both sides of step cannot be covered: that is an error.
func (r *RunDir) coveredLedgers(step int) (map[string]string, error) {
	if r.ledgers == nil {
		r.ledgers = map[string]string{}
	}
	files, err := LedgerFiles(r.Path)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, f := range files {
		name := filepath.Base(f.Path)
		if _, known := r.ledgers[name]; known || f.First > step {
			continue
		}
		sum, err := fileSum(f.Path)
		if err != nil {
			return nil, fmt.Errorf("checksum ledger: %w", err)
		}
		r.ledgers[name] = sum
	}
	out := map[string]string{}
	for name, sum := range r.ledgers {
		first, last, _ := ParseLedgerName(name)
		switch {
		case last <= step:
			out[name] = sum
		case first <= step:
			return nil, fmt.Errorf("ledger %s holds steps after step %d: a checkpoint cannot cover it", name, step)
		}
	}
	return out, nil
}

// setAsideLedgers renames the ledger files of steps after step to
// NAME.stale, and forgets their checksums.
func (r *RunDir) setAsideLedgers(step int) error {
	files, err := LedgerFiles(r.Path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("set aside ledgers: %w", err)
	}
	for _, f := range files {
		if f.Last <= step {
			continue
		}
		if err := os.Rename(f.Path, f.Path+".stale"); err != nil {
			return fmt.Errorf("set aside ledger: %w", err)
		}
		delete(r.ledgers, filepath.Base(f.Path))
		slog.Warn("ledger set aside: the run continues from an earlier step and writes these steps again",
			"path", f.Path+".stale", "resumed_step", step)
	}
	return nil
}

// ledgerPath is the path of the ledger file name.
func (r *RunDir) ledgerPath(name string) string {
	return filepath.Join(r.Path, ledgerDir, name)
}
