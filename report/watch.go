package report

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/grpo"
)

// Watch regenerates the report into outDir whenever a run directory's
// metrics, status or samples change, every interval at most, with
// report.html reloading itself in the browser while a run trains. It
// returns after the report that shows every run stopped (finished, failed,
// interrupted, or its process gone), or when ctx is done. A run directory
// that has no metrics yet (training just started) is waited for.
func Watch(ctx context.Context, runDirs []string, outDir string, interval time.Duration, written func(Result)) error {
	if interval <= 0 {
		return fmt.Errorf("report: watch interval must be > 0, got %v", interval)
	}
	var last string
	waiting := false
	tick := time.NewTicker(interval)
	defer tick.Stop()
	for {
		fp := fingerprint(runDirs)
		if fp != last {
			res, err := GenerateLive(ctx, runDirs, outDir, interval)
			switch {
			case err != nil && ctx.Err() != nil:
				return ctx.Err()
			case err != nil && notYet(err):
				if !waiting {
					slog.Info("waiting for the run to write metrics", "error", err)
					waiting = true
				}
			case err != nil:
				return err
			default:
				waiting = false
				last = fp
				if written != nil {
					written(res)
				}
				if !res.InProgress {
					return nil
				}
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}

// notYet reports whether a load error only means the run has not written
// its first metrics line yet.
func notYet(err error) bool {
	return errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNoLines)
}

// fingerprint changes whenever a file the report reads changes.
func fingerprint(runDirs []string) string {
	var b []byte
	for _, d := range runDirs {
		for _, f := range []string{MetricsFile, grpo.StatusFile, ConfigFile, "samples"} {
			st, err := os.Stat(filepath.Join(d, f))
			if err != nil {
				b = append(b, '-')
				continue
			}
			b = fmt.Appendf(b, "%s:%d:%d;", f, st.Size(), st.ModTime().UnixNano())
		}
	}
	return string(b)
}
