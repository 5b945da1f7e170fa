package atomicfile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// ReplaceDir gives dir the content write puts into an empty directory, so
// that a reader sees the old directory or the complete new one, never a
// mix of the two (no file of the old content survives the replacement).
// write fills a temporary sibling of dir; only when it succeeds does the
// sibling take dir's place: in one atomic exchange where the system has one
// (Linux's renameat2 RENAME_EXCHANGE), otherwise by moving the old
// directory aside and the new one in (a reader may then find no directory
// for that instant; a crash between the two renames leaves the old content
// beside dir as .NAME.old-*). A failed write leaves dir untouched and no
// sibling behind.
func ReplaceDir(dir string, write func(tmp string) error) error {
	return replaceDir(dir, write, exchange)
}

// replaceDir is ReplaceDir with the exchange to use (tests take the
// fallback by passing one that fails).
func replaceDir(dir string, write func(tmp string) error, exchange func(a, b string) error) (err error) {
	parent, base := filepath.Dir(dir), filepath.Base(dir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	tmp, err := os.MkdirTemp(parent, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := write(tmp); err != nil {
		return err
	}
	SyncDir(tmp)
	if _, err := os.Lstat(dir); errors.Is(err, os.ErrNotExist) {
		if err := os.Rename(tmp, dir); err != nil {
			return fmt.Errorf("rename into %s: %w", dir, err)
		}
		SyncDir(parent)
		return nil
	}
	if exchange(tmp, dir) == nil {
		SyncDir(parent)
		// tmp now holds the old content.
		if err := os.RemoveAll(tmp); err != nil {
			return fmt.Errorf("remove the replaced %s (now %s): %w", dir, tmp, err)
		}
		return nil
	}
	old, err := os.MkdirTemp(parent, "."+base+".old-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", dir, err)
	}
	if err := os.Rename(dir, filepath.Join(old, base)); err != nil {
		os.Remove(old)
		return fmt.Errorf("move %s aside: %w", dir, err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		if rerr := os.Rename(filepath.Join(old, base), dir); rerr != nil {
			return fmt.Errorf("rename into %s: %w (the old content is in %s)", dir, err, old)
		}
		os.Remove(old)
		return fmt.Errorf("rename into %s: %w", dir, err)
	}
	SyncDir(parent)
	if err := os.RemoveAll(old); err != nil {
		return fmt.Errorf("remove the replaced %s (now %s): %w", dir, old, err)
	}
	return nil
}

// SyncDir makes the renames and removals already done in dir survive a
// crash (best effort: not every file system can sync a directory).
func SyncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
}
