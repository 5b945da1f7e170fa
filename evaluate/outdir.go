package evaluate

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/himes-rl/himes/datasets"
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

// WriteOutputDir replaces the folder dir whole with an evaluation's outputs
// (ReplaceOutputDir): summary.json, summary.md, qrels.txt, one TREC run per
// system (runs/<FileSafe(name)>.trec), turns.parquet and the caller's extra
// files; no stale runs/*.trec of a system evaluated before and not now.
func WriteOutputDir(dir string, rep Report, results [][]TurnResult, turns []datasets.Turn, extra ...OutputFile) error {
	return ReplaceOutputDir(dir, func(tmp string) error { return writeOutputFiles(tmp, rep, results, turns, extra) })
}

// OutputFile is a file the caller adds to an evaluation folder (e.g. the
// resolved config that produced it), written with the rest.
type OutputFile struct {
	Name string
	Data []byte
}

func writeOutputFiles(dir string, rep Report, results [][]TurnResult, turns []datasets.Turn, extra []OutputFile) error {
	if err := os.MkdirAll(filepath.Join(dir, "runs"), 0o755); err != nil {
		return fmt.Errorf("eval output: %w", err)
	}
	type outputWriter struct {
		name  string
		write func(io.Writer) error
	}
	files := []outputWriter{
		{"summary.json", func(w io.Writer) error { return WriteJSON(w, rep) }},
		{"summary.md", func(w io.Writer) error { return WriteMarkdown(w, rep) }},
		{"qrels.txt", func(w io.Writer) error { return WriteQrels(w, turns) }},
	}
	for i, s := range rep.Systems {
		tag := FileSafe(s.Name)
		files = append(files, outputWriter{filepath.Join("runs", tag+".trec"), func(w io.Writer) error { return WriteTRECRun(w, results[i], tag) }})
	}
	for _, fl := range files {
		if err := atomicfile.Write(filepath.Join(dir, fl.name), 0o644, fl.write); err != nil {
			return err
		}
	}
	for _, f := range extra {
		if err := atomicfile.WriteFile(filepath.Join(dir, f.Name), f.Data, 0o644); err != nil {
			return err
		}
	}
	return WriteTurnsParquet(filepath.Join(dir, "turns.parquet"), results)
}

// CheckFailedTurns fails an evaluation when a system failed more turns than
// bound (rollout.max_failed_fraction) allows (the outputs are written, and
// label the failures), or when every turn failed.
func CheckFailedTurns(rep Report, bound float64, turnsFile string) error {
	var over []string
	failed, total := 0, 0
	for _, s := range rep.Systems {
		failed, total = failed+s.Failed, total+s.Turns
		if float64(s.Failed) > bound*float64(s.Turns) {
			over = append(over, fmt.Sprintf("%s %d of %d", s.Name, s.Failed, s.Turns))
		}
	}
	if len(over) > 0 {
		return fmt.Errorf("failed turns above rollout.max_failed_fraction %g: %s; its numbers are not a comparison (failures in %s)",
			bound, strings.Join(over, ", "), turnsFile)
	}
	if total > 0 && failed == total {
		return fmt.Errorf("every turn failed (see %s)", turnsFile)
	}
	return nil
}

// LimitConversations keeps the turns of the first n conversations (n ≤ 0: all).
func LimitConversations(turns []datasets.Turn, n int) []datasets.Turn {
	if n <= 0 {
		return turns
	}
	keep := map[string]bool{}
	var out []datasets.Turn
	for _, t := range turns {
		if !keep[t.ConvID] {
			if len(keep) == n {
				continue
			}
			keep[t.ConvID] = true
		}
		out = append(out, t)
	}
	return out
}
