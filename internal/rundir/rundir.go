// Package rundir owns a run's output directory: its creation rules (never two
// runs in one directory by accident, never a directory himes did not make),
// an exclusive lock held while a process uses it, the file layout, and the
// saved harness state with checksums and retention of the last K checkpoints.
package rundir

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// Mode says what to do when the run directory already exists.
type Mode int

const (
	// New refuses an existing, non-empty run directory.
	New Mode = iota
	// Resume requires the run directory to exist.
	Resume
	// Overwrite deletes an existing run directory's contents first.
	Overwrite
)

const (
	// markerName is the file himes writes into every run directory it
	// creates: --overwrite deletes only directories that carry it.
	markerName = ".himes-run"
	// lockName is the file a process holds an exclusive flock on while it
	// uses the run directory; it holds that process's pid.
	lockName = ".himes-lock"
	// markerFormat identifies marker files; markerFormatV1 those of a himes
	// from before markers carried an id and a checksum.
	markerFormat   = "himes-run/2"
	markerFormatV1 = "himes-run/1"
)

// subdirs are the run directory's own subdirectories. None may be a
// symbolic link: retention deletes files in state/ and trainer/, and must
// never reach into another directory through a link.
var subdirs = []string{"ledger", "state", "trainer"}

// marker is the content of the run marker.
type marker struct {
	Format    string    `json:"format"`
	CreatedAt time.Time `json:"created_at"`
	// Resumes counts the processes that reopened the run with --resume; a
	// resumed process's step ids carry it, so no two processes share them.
	Resumes int `json:"resumes"`
	// ID names the run directory (random, from its creation) and SHA256
	// covers the other fields (markerSum): --overwrite deletes only a
	// directory whose marker himes wrote, never one that merely holds a
	// file of that name (item 12 of issue 27).
	ID     string `json:"id,omitempty"`
	SHA256 string `json:"sha256,omitempty"`
}

// RunDir is a run's output directory: config snapshot, version, metrics,
// ledger, and harness checkpoints. It holds the directory's lock until Close.
type RunDir struct {
	Path string

	mode    Mode
	madeDir bool // Open created the directory itself
	resumes int
	lock    *os.File
	// ledgers are the sha256 of the ledger files the next saved state
	// covers, by file name: loaded from the adopted state, extended as
	// ledgers are written.
	ledgers map[string]string
}

// Check reports, without changing anything, whether Open would refuse
// base/name in mode: run it before expensive setup, so a mistake (a missing
// --resume, a directory that is not a run, a run in use) is reported at once.
func Check(base, name string, mode Mode) error {
	path := filepath.Join(base, name)
	if _, err := inspect(path, mode); err != nil {
		return err
	}
	return probeLock(path)
}

// dirState is what inspect found in a run directory.
type dirState struct {
	exists  bool // the directory exists
	content bool // it holds something besides the marker and the lock
	marked  bool // it carries the run marker (or is a run of an older himes)
	// badMarker: a file named like the marker that himes did not write.
	badMarker error
}

// inspect applies the mode's rules to what path holds.
func inspect(path string, mode Mode) (dirState, error) {
	var st dirState
	entries, err := os.ReadDir(path)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return st, fmt.Errorf("run directory %s: %w", path, err)
	default:
		st.exists = true
	}
	names := map[string]bool{}
	for _, e := range entries {
		names[e.Name()] = true
		switch e.Name() {
		case markerName:
			if _, err := readMarkerFile(filepath.Join(path, markerName)); err != nil {
				st.badMarker = err
			} else {
				st.marked = true
			}
			st.content = st.content || st.badMarker != nil
		case lockName:
		default:
			st.content = true
		}
	}
	if !st.marked && names["config.yaml"] && names["version.json"] && names["state"] {
		st.marked = true // made by a himes from before run markers
	}
	switch mode {
	case New:
		if st.content && st.marked {
			return st, fmt.Errorf("run directory %s already exists: pass --resume to continue it or --overwrite to replace it", path)
		}
		if st.content {
			return st, fmt.Errorf("run directory %s exists and is not a himes run directory: choose another run.name or run.output_dir", path)
		}
	case Resume:
		if !st.content {
			return st, fmt.Errorf("--resume: run directory %s does not exist", path)
		}
		if !st.marked {
			return st, fmt.Errorf("--resume: %s is not a himes run directory (no %s marker)", path, markerName)
		}
	case Overwrite:
		if st.badMarker != nil {
			return st, fmt.Errorf("--overwrite: %s holds a %s file that himes did not write (%v), so it is not deleted: remove it yourself or choose another run.name", path, markerName, st.badMarker)
		}
		if st.content && !st.marked {
			return st, fmt.Errorf("--overwrite: %s is not a himes run directory (no %s marker), so it is not deleted: remove it yourself or choose another run.name", path, markerName)
		}
	}
	return st, nil
}

// Open creates or reopens base/name according to mode and takes its lock,
// which it keeps until Close (or the process's end): a second process on the
// same run directory fails here, naming the holder's pid.
func Open(base, name string, mode Mode) (*RunDir, error) {
	return open(base, name, mode, nil)
}

// open is Open; beforeLock, when set, runs between the check of the
// directory and the lock (the tests race a second Open there).
func open(base, name string, mode Mode, beforeLock func()) (*RunDir, error) {
	path := filepath.Join(base, name)
	if _, err := inspect(path, mode); err != nil {
		return nil, err
	}
	if beforeLock != nil {
		beforeLock()
	}
	r := &RunDir{Path: path, mode: mode}
	// Mkdir, not MkdirAll: madeDir must say that this process made it, not
	// that it was missing when inspected (another process may have made it
	// since).
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	switch err := os.Mkdir(path, 0o755); {
	case err == nil:
		r.madeDir = true
	case !errors.Is(err, os.ErrExist):
		return nil, fmt.Errorf("create run directory: %w", err)
	}
	var err error
	if r.lock, err = acquireLock(path); err != nil {
		// Never remove the lock file here: another process holds it (item 1
		// of issue 33: removing it let a third process in beside the
		// holder). The directory goes only if it is still empty.
		if r.madeDir {
			os.Remove(path)
		}
		return nil, err
	}
	if err := r.prepare(); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// prepare does the mode's work under the lock: the rules again (another
// process may have changed the directory before the lock was taken), the
// overwrite, the marker, and the layout.
func (r *RunDir) prepare() error {
	if _, err := inspect(r.Path, r.mode); err != nil {
		return err
	}
	if r.mode == Overwrite {
		if err := r.clear(true); err != nil {
			return fmt.Errorf("--overwrite: %w", err)
		}
	}
	m := newMarker()
	if r.mode == Resume {
		m = r.readMarker()
		m.Resumes++
	}
	m.Format = markerFormat
	m.SHA256 = markerSum(m)
	if err := atomicfile.WriteJSON(r.File(markerName), m); err != nil {
		return fmt.Errorf("write run marker: %w", err)
	}
	r.resumes = m.Resumes
	for _, sub := range subdirs {
		fi, err := os.Lstat(filepath.Join(r.Path, sub))
		if err == nil && fi.Mode()&os.ModeSymlink != 0 {
			return fmt.Errorf("run directory %s: %s is a symbolic link; himes deletes old checkpoints there and never follows links (link the whole run directory instead)", r.Path, sub)
		}
		if err == nil && !fi.IsDir() {
			return fmt.Errorf("run directory %s: %s is not a directory", r.Path, sub)
		}
	}
	for _, sub := range []string{"ledger", "state"} {
		if err := os.MkdirAll(filepath.Join(r.Path, sub), 0o755); err != nil {
			return fmt.Errorf("create run directory: %w", err)
		}
	}
	return nil
}

// readMarker returns the run marker; a missing (older himes) or damaged one
// counts no resumes, with a warning for the damaged one.
func (r *RunDir) readMarker() marker {
	m := newMarker()
	got, err := readMarkerFile(r.File(markerName))
	if errors.Is(err, os.ErrNotExist) {
		return m
	}
	if got.ID == "" {
		got.ID = m.ID // a marker of an older himes gets its id now
	}
	if err != nil {
		slog.Warn("run marker is damaged: rewriting it", "path", r.File(markerName), "error", err)
		return m
	}
	return got
}

// clear removes everything in the run directory but the lock (and, when
// keepMarker, the marker). Links are removed, never followed.
func (r *RunDir) clear(keepMarker bool) error {
	entries, err := os.ReadDir(r.Path)
	if err != nil {
		return err
	}
	for _, e := range entries {
		if e.Name() == lockName || (keepMarker && e.Name() == markerName) {
			continue
		}
		if err := os.RemoveAll(filepath.Join(r.Path, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// Generation is how many times the run was reopened with --resume,
// counting this process (0 for a run this process created).
func (r *RunDir) Generation() int { return r.resumes }

// Created reports whether this process created the run (New or Overwrite),
// so that Discard may remove it.
func (r *RunDir) Created() bool { return r.mode != Resume }

// Discard removes what a run that this process created wrote, when the run
// failed before saving anything worth resuming: re-running it then needs
// neither --resume nor --overwrite. It releases the lock.
func (r *RunDir) Discard() error {
	if !r.Created() {
		return fmt.Errorf("run directory %s was not created by this process", r.Path)
	}
	if err := r.clear(false); err != nil {
		return fmt.Errorf("remove partial run directory: %w", err)
	}
	// The lock file is removed while still held, then released: a process
	// that locks after this creates a new one, and none can hold the old,
	// unlinked one beside it.
	if err := os.Remove(filepath.Join(r.Path, lockName)); err != nil && !errors.Is(err, os.ErrNotExist) {
		r.Close()
		return fmt.Errorf("remove partial run directory: %w", err)
	}
	r.Close()
	if r.madeDir {
		if err := os.Remove(r.Path); err != nil {
			return fmt.Errorf("remove partial run directory: %w", err)
		}
	}
	return nil
}

// Close releases the run directory's lock.
func (r *RunDir) Close() error {
	if r.lock == nil {
		return nil
	}
	err := releaseLock(r.lock)
	r.lock = nil
	return err
}

// File returns the path of a file in the run directory.
func (r *RunDir) File(name string) string { return filepath.Join(r.Path, name) }

// SamplesPath is the samples table of the evaluation at step in phase
// (init, sft or grpo: step 0 can have two evaluations).
func (r *RunDir) SamplesPath(step int, phase string) string {
	return filepath.Join(r.Path, "samples", fmt.Sprintf("step-%06d-%s.parquet", step, phase))
}

func newMarker() marker {
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	return marker{Format: markerFormat, CreatedAt: time.Now().UTC(), ID: hex.EncodeToString(id)}
}

// markerSum is the checksum a marker records over its other fields.
func markerSum(m marker) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%s\n%d\n", m.Format, m.CreatedAt.UTC().Format(time.RFC3339Nano), m.ID, m.Resumes)
	return hex.EncodeToString(h.Sum(nil))
}

// readMarkerFile reads and verifies a run marker: its format, and for the
// current format its id and checksum. An empty file, another program's file
// of that name or an edited marker is an error.
func readMarkerFile(path string) (marker, error) {
	var m marker
	b, err := os.ReadFile(path)
	if err != nil {
		return m, err
	}
	if len(b) > 4096 {
		return m, fmt.Errorf("%d bytes, a marker has under 300", len(b))
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("not a marker: %w", err)
	}
	switch {
	case m.Format == markerFormatV1 && !m.CreatedAt.IsZero():
		return m, nil // written by an older himes, before ids and checksums
	case m.Format != markerFormat:
		return m, fmt.Errorf("format %q, want %q", m.Format, markerFormat)
	case m.ID == "" || m.SHA256 != markerSum(m):
		return m, fmt.Errorf("no id, or a checksum that does not match its fields")
	}
	return m, nil
}
