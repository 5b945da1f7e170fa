package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/internal/sharedtest"
)

// TestEvalRefusesAnOutputInUse: while one evaluation holds --out (here
// this process, as a first himes eval would), a second into the same folder
// fails at once, naming the holder's pid, and writes nothing; before the
// lock both ran to exit 0 and one's systems were lost.
func TestEvalRefusesAnOutputInUse(t *testing.T) {
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	out := filepath.Join(t.TempDir(), "ev")
	lock, err := rundir.LockOutput("eval output", out)
	if err != nil {
		t.Fatal(err)
	}
	_, logs, err := runCLILogged(t, "eval", "--config", cfg, "--rewriter", "raw", "--limit", "1", "--resamples", "40", "--out", out)
	wantEarlyError(t, logs, err, out, fmt.Sprintf("in use by pid %d", os.Getpid()))
	if _, serr := os.Stat(out); !os.IsNotExist(serr) {
		t.Errorf("the refused evaluation wrote %s: %v", out, serr)
	}
	if err := lock.Close(); err != nil {
		t.Fatal(err)
	}
	// Released: the next evaluation runs.
	if _, err := runCLI(t, "eval", "--config", cfg, "--rewriter", "raw", "--limit", "1", "--resamples", "40", "--out", out); err != nil {
		t.Fatalf("eval after the lock was released: %v", err)
	}
}

// TestEvalLabelsAnUntrainedPolicy: --rewriter policy without --run or
// --checkpoint evaluates the embedded endpoint's fresh policy (policy_version
// 0); every output calls it "policy (untrained)" (runs/policy_untrained.trec
// where a file name is needed), never plain "policy", and a warning says so.
func TestEvalLabelsAnUntrainedPolicy(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: evaluates the quickstart's held-out split through the embedded policy (about 10 s)")
	}
	cfg := filepath.Join(sharedtest.RepoRoot(t), "configs", "quickstart.yaml")
	out := filepath.Join(t.TempDir(), "ev")
	stdout, logs, err := runCLILogged(t, "eval", "--config", cfg, "--rewriter", "raw,policy", "--limit", "2", "--resamples", "40", "--out", out)
	if err != nil {
		t.Fatalf("eval: %v\n%s", err, logs)
	}
	if !strings.Contains(logs, "level=WARN") || !strings.Contains(logs, "policy_version 0") {
		t.Errorf("no warning about the untrained policy:\n%s", logs)
	}
	if !strings.Contains(stdout, "| policy (untrained) |") || strings.Contains(stdout, "| policy |") {
		t.Errorf("table does not label the untrained policy:\n%s", stdout)
	}
	var rep evaluate.Report
	b, err := os.ReadFile(filepath.Join(out, "summary.json"))
	if err == nil {
		err = json.Unmarshal(b, &rep)
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, s := range rep.Systems {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"raw", "policy (untrained)"}) {
		t.Errorf("summary.json systems %q", names)
	}
	want := []string{evaluate.OutputMarker, "config.yaml", "qrels.txt", "runs/policy_untrained.trec", "runs/raw.trec", "summary.json", "summary.md",
		"turns.parquet", "version.json"}
	if got := listTree(t, out); !slices.Equal(got, want) {
		t.Errorf("wrote %v, want %v", got, want)
	}
	trec, err := os.ReadFile(filepath.Join(out, "runs", "policy_untrained.trec"))
	if err != nil || !strings.HasSuffix(strings.SplitN(string(trec), "\n", 2)[0], " policy_untrained") {
		t.Errorf("TREC run's tag: %v %.80q", err, trec)
	}
}
