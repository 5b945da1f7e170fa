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
	path := filepath.Join(dir, lockName)
	var f *os.File
	for try := 0; ; try++ {
		var err error
		f, err = os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("lock run directory: %w", err)
		}
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); errors.Is(err, syscall.ENOLCK) || errors.Is(err, syscall.EOPNOTSUPP) {
			// Some network file systems have no flock: run, but say so.
			slog.Warn("the file system does not support locks: nothing stops a second process from using this run directory", "run", dir, "error", err)
			break
		} else if err != nil {
			f.Close()
			return nil, lockError(dir, path, err)
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
			return nil, fmt.Errorf("lock run directory %s: %s keeps being replaced", dir, path)
		}
	}
	pid := []byte(strconv.Itoa(os.Getpid()) + "\n")
	err := f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt(pid, 0)
	}
	if err != nil {
		releaseLock(f)
		return nil, fmt.Errorf("lock run directory: write %s: %w", path, err)
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
		return lockError(dir, path, err)
	}
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}

// lockError names the process that holds the lock.
func lockError(dir, path string, err error) error {
	if !errors.Is(err, syscall.EWOULDBLOCK) {
		return fmt.Errorf("lock run directory %s: %w", dir, err)
	}
	holder := "another process"
	if b, rerr := os.ReadFile(path); rerr == nil {
		if pid := strings.TrimSpace(string(b)); pid != "" {
			holder = "pid " + pid
		}
	}
	return fmt.Errorf("run directory %s is in use by %s (it holds %s); wait for it to finish or stop it", dir, holder, path)
}

func releaseLock(f *os.File) error {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
