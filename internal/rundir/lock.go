package rundir

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// acquireLock takes the run directory's exclusive lock without waiting and
// records this process's pid in the lock file. The kernel drops the lock
// when the process ends, however it ends, so a killed run never leaves a
// stale lock behind.
func acquireLock(dir string) (*os.File, error) {
	return lockFile("run directory", dir, filepath.Join(dir, lockName))
}

// lockFile takes the exclusive lock of path, which guards what (a kind and
// a path, for messages), and records this process's pid in it.
func lockFile(kind, what, path string) (*os.File, error) {
	var f *os.File
	for try := 0; ; try++ {
		var err error
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", kind, err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
			// Some network file systems have no flock: run, but say so.
			slog.Warn("the file system does not support locks: nothing stops a second process from using this "+kind, "path", what, "error", err)
			break
		} else if err != nil {
			f.Close()
			return nil, lockError(kind, what, path, err)
		}
		// The file locked must still be the one at the path: a discarded
		// run unlinks its lock file, and a lock on the unlinked file would
		// exclude no one who opens the path after.
		fi, ferr := f.Stat()
		pi, perr := os.Stat(path)
		if ferr == nil && perr == nil && os.SameFile(fi, pi) {
			break
		}
		releaseLock(f)
		if try == 10 {
			return nil, fmt.Errorf("lock %s %s: %s keeps being replaced", kind, what, path)
		}
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		releaseLock(f)
		return nil, fmt.Errorf("lock %s: write %s: %w", kind, path, err)
	}
	return f, nil
}

// probeLock fails when another process holds the run directory's lock.
func probeLock(dir string) error {
	path := filepath.Join(dir, lockName)
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("lock run directory: %w", err)
	}
	defer f.Close()
	err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
		return nil // acquireLock warns
	}
	if err != nil {
		return lockError("run directory", dir, path, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// lockError names the process that holds the lock of path, which guards
// what.
func lockError(kind, what, path string, err error) error {
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("lock %s %s: %w", kind, what, err)
	}
	holder := "another process"
	if b, rerr := os.ReadFile(path); rerr == nil {
		if pid := strings.TrimSpace(string(b)); pid != "" {
			holder = "pid " + pid
		}
	}
	return fmt.Errorf("%s %s is in use by %s (it holds %s); wait for it to finish or stop it", kind, what, holder, path)
}

func releaseLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// OutputLock is the exclusive lock of an output that a command replaces
// whole (himes eval's --out folder): it lives in a file beside the output,
// which the swap does not touch, and the kernel drops it when the process
// ends, however it ends. Close removes the file, so a finished command
// leaves nothing beside its output.
type OutputLock struct {
	f    *os.File
	path string
}

// LockOutput takes out's lock (the file out + ".lock") without waiting; a
// second process fails at once, naming the holder's pid.
func LockOutput(kind, out string) (*OutputLock, error) {
	out = filepath.Clean(out)
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return nil, fmt.Errorf("lock %s %s: %w", kind, out, err)
	}
	path := out + ".lock"
	// The holder removes the file when it is done: a process that opened
	// it just before then locks a file no longer under that name, and must
	// take the lock again on the file that is.
	for range 8 {
		f, err := lockFile(kind, out, path)
		if err != nil {
			return nil, err
		}
		held, serr := f.Stat()
		cur, perr := os.Stat(path)
		if serr == nil && perr == nil && os.SameFile(held, cur) {
			return &OutputLock{f: f, path: path}, nil
		}
		releaseLock(f)
	}
	return nil, fmt.Errorf("lock %s %s: %s keeps being replaced", kind, out, path)
}

// Close removes the lock file and releases the lock (in that order: a
// process that locks the removed file sees it is no longer the lock).
func (l *OutputLock) Close() error {
	if l == nil || l.f == nil {
		return nil
	}
	err := os.Remove(l.path)
	if rerr := releaseLock(l.f); err == nil {
		err = rerr
	}
	l.f = nil
	return err
}
