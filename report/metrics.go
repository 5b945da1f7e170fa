// Package report turns the metrics.jsonl of one or more training runs into
// PNG plots (gonum/plot) and a self-contained HTML report that embeds them,
// so runs can be compared by looking rather than reading logs.
package report

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/trainer"
)

// Run is what a report shows of one run directory.
type Run struct {
	Name  string
	Dir   string
	Steps []grpo.StepMetrics
	Evals []grpo.EvalMetrics
	SFT   []grpo.SFTMetrics // epochs of the SFT phase, when the run had one
	// Config is the run's resolved config.yaml, verbatim ("" when absent).
	Config string
	// Skipped counts metrics lines of kinds the report does not plot.
	Skipped int
	// Status is the run's status.json (HasStatus false when it has none).
	Status    grpo.Status
	HasStatus bool
	// Alive: the process a "running" status names still existed (checked
	// before the status was last read; true on another host).
	Alive bool
	// Samples is the newest evaluation's samples table (nil when none).
	Samples []grpo.SampleRow
}

// MetricsFile and ConfigFile are the names the training loop writes in a run dir.
const (
	MetricsFile = "metrics.jsonl"
	ConfigFile  = "config.yaml"
)

var errNoLines = errors.New("no step, eval or sft lines")

// LoadRun reads dir/metrics.jsonl (required), and status.json, the newest
// samples table and config.yaml when present.
func LoadRun(ctx context.Context, dir string) (Run, error) {
	run := Run{Name: filepath.Base(filepath.Clean(dir)), Dir: dir}
	// The status first: the loop writes its final status after its last
	// metrics line, so a final status read here means the metrics read
	// next are complete.
	var err error
	if run.Status, run.HasStatus, run.Alive, err = readStatus(dir); err != nil {
		return run, fmt.Errorf("run %s: %w", dir, err)
	}
	path := filepath.Join(dir, MetricsFile)
	f, err := os.Open(path)
	if err != nil {
		return run, fmt.Errorf("run %s: %w", dir, err)
	}
	defer f.Close()
	m, err := ReadMetrics(ctx, f, path)
	if err != nil {
		return run, err
	}
	run.Steps, run.Evals, run.SFT, run.Skipped = m.Steps, m.Evals, m.SFT, m.Skipped
	if len(run.Steps) == 0 && len(run.Evals) == 0 && len(run.SFT) == 0 {
		return run, fmt.Errorf("%s: %w", path, errNoLines)
	}
	if run.Samples, err = latestSamples(dir); err != nil {
		return run, err
	}
	cfg, err := os.ReadFile(filepath.Join(dir, ConfigFile))
	switch {
	case err == nil:
		run.Config = redactToken(string(cfg))
	case errors.Is(err, os.ErrNotExist):
		slog.Debug("run has no config.yaml", "dir", dir)
	default:
		return run, fmt.Errorf("run %s: %w", dir, err)
	}
	return run, nil
}

// Metrics are the lines of one metrics.jsonl, by kind, in file order.
type Metrics struct {
	Steps []grpo.StepMetrics
	Evals []grpo.EvalMetrics
	SFT   []grpo.SFTMetrics
	// Skipped counts lines of other kinds.
	Skipped int
}

// ReadMetrics parses metrics.jsonl lines: "step", "eval" and "sft" lines are
// kept, other kinds are counted as skipped, and a malformed line is an error
// naming name:line and the field when JSON says which.
func ReadMetrics(ctx context.Context, r io.Reader, name string) (Metrics, error) {
	var m Metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	line := 0
	for sc.Scan() {
		line++
		if line%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return Metrics{}, err
			}
		}
		b := sc.Bytes()
		if len(b) == 0 {
			continue
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := json.Unmarshal(b, &head); err != nil {
			return Metrics{}, fmt.Errorf("%s:%d: %w", name, line, jsonErr(err))
		}
		var err error
		switch head.Kind {
		case "step":
			var v grpo.StepMetrics
			if err = json.Unmarshal(b, &v); err == nil {
				m.Steps = append(m.Steps, v)
			}
		case "eval":
			var v grpo.EvalMetrics
			if err = json.Unmarshal(b, &v); err == nil {
				m.Evals = append(m.Evals, v)
			}
		case "sft":
			var v grpo.SFTMetrics
			if err = json.Unmarshal(b, &v); err == nil {
				m.SFT = append(m.SFT, v)
			}
		case "":
			return Metrics{}, fmt.Errorf("%s:%d: field kind: missing", name, line)
		default:
			m.Skipped++
		}
		if err != nil {
			return Metrics{}, fmt.Errorf("%s:%d: %s line: %w", name, line, head.Kind, jsonErr(err))
		}
	}
	if err := sc.Err(); err != nil {
		return Metrics{}, fmt.Errorf("%s: line %d: %w", name, line+1, err)
	}
	return m, nil
}

// jsonErr names the offending field of a type error.
func jsonErr(err error) error {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) && te.Field != "" {
		return fmt.Errorf("field %s: want %s, got JSON %s", te.Field, te.Type, te.Value)
	}
	return err
}

// latestSamples reads the newest samples/step-*.parquet: the highest step,
// and at step 0 the later phase (sft after init).
func latestSamples(dir string) ([]grpo.SampleRow, error) {
	files, err := filepath.Glob(filepath.Join(dir, "samples", "step-*.parquet"))
	if err != nil || len(files) == 0 {
		return nil, err
	}
	rank := func(f string) string {
		// step-NNNNNN-PHASE: zero-padded steps sort as text; init < sft < grpo.
		b := strings.TrimSuffix(filepath.Base(f), ".parquet")
		return strings.NewReplacer("-init", "-0", "-sft", "-1", "-grpo", "-2").Replace(b)
	}
	sort.Slice(files, func(i, j int) bool { return rank(files[i]) < rank(files[j]) })
	rows, err := grpo.ReadSamples(files[len(files)-1])
	if err != nil {
		return nil, fmt.Errorf("run %s: %w", dir, err)
	}
	return rows, nil
}

// readStatus reads status.json and, when it says running, whether its
// process is alive. The process is checked before a second read: a process
// that was gone at the check had written its final status before the
// second read if it ever did, so "running" then really means it died.
func readStatus(dir string) (st grpo.Status, ok, live bool, err error) {
	if st, ok, err = grpo.ReadStatus(dir); err != nil || !ok || st.State != grpo.StateRunning {
		return st, ok, false, err
	}
	live = alive(st)
	st, ok, err = grpo.ReadStatus(dir)
	return st, ok, live, err
}

// tokenLine matches a YAML "token:" key with a literal value: runs written
// before tokens were redacted hold the bearer token in config.yaml.
var tokenLine = regexp.MustCompile(`(?m)^(\s*token:[ \t]*)(["']?)([^"'$\s#][^\n]*?)(["']?)[ \t]*$`)

// redactToken hides a literal token in a config shown in a report.
func redactToken(cfg string) string {
	return tokenLine.ReplaceAllStringFunc(cfg, func(line string) string {
		m := tokenLine.FindStringSubmatch(line)
		if m[3] == trainer.RedactedToken {
			return line
		}
		return m[1] + trainer.RedactedToken
	})
}
