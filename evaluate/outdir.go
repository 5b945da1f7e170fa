package evaluate

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/himes-rl/himes/internal/atomicfile"
)

// OutputMarker is the file every `himes eval` output folder carries: a
// folder with it may be replaced whole by the next evaluation.
const OutputMarker = ".himes-eval"

// outputMarkerFormat identifies marker files.
const outputMarkerFormat = "himes-eval/1"

// CheckOutputDir refuses an output folder that an evaluation may not
// replace: an existing file, or a non-empty folder that is not an earlier
// evaluation's (no OutputMarker, and not summary.json with turns.parquet,
// as himes eval wrote before it had a marker). Call it before the costly
// work, so a wrong --out is reported at once.
func CheckOutputDir(dir string) error {
	fi, err := os.Stat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("eval output %s: %w", dir, err)
	}
	if !fi.IsDir() {
		return fmt.Errorf("eval output %s: exists and is not a directory", dir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("eval output %s: %w", dir, err)
	}
	if len(entries) == 0 || isOutputDir(dir) {
		return nil
	}
	return fmt.Errorf("eval output %s: exists and is not a himes eval folder (no %s): it is not replaced; choose another --out or remove it",
		dir, OutputMarker)
}

func isOutputDir(dir string) bool {
	exists := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, name))
		return err == nil
	}
	return exists(OutputMarker) || (exists("summary.json") && exists("turns.parquet"))
}

// ReplaceOutputDir writes an evaluation's outputs: write fills an empty
// folder, which then replaces dir whole (atomicfile.ReplaceDir), so no file
// of an earlier evaluation (a system evaluated then and not now) is left
// beside the new summary. dir is checked again (CheckOutputDir), as it may
// have appeared while the evaluation ran.
func ReplaceOutputDir(dir string, write func(tmp string) error) error {
	if err := CheckOutputDir(dir); err != nil {
		return err
	}
	return atomicfile.ReplaceDir(dir, func(tmp string) error {
		marker := map[string]any{"format": outputMarkerFormat, "created_at": time.Now().UTC()}
		if err := atomicfile.WriteJSON(filepath.Join(tmp, OutputMarker), marker); err != nil {
			return err
		}
		return write(tmp)
	})
}
