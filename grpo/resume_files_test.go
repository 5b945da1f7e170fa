package grpo

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/trainer"
)

// crashAt runs a fresh run of steps steps that "dies" (a panic, recovered
// here) at fault point at; checkpoint_every 0 and eval_every 0 leave only
// the step-0 checkpoint on disk, as a kill before the first periodic one does.
func crashAt(t *testing.T, steps int, at string, atStep int, cfgf func(*Config)) (string, *fakePolicy) {
	t.Helper()
	base, run, pol := freshRun(t)
	defer run.Close()
	cfg := testConfig()
	cfg.Steps, cfg.CheckpointEvery = steps, 0
	if cfgf != nil {
		cfgf(&cfg)
	}
	l := newTestLoop(t, cfg, pol, run)
	type crash struct{}
	l.deps.Fault = func(point string, step int) {
		if point == at && step == atStep {
			panic(crash{})
		}
	}
	func() {
		defer func() {
			if r := recover(); r != nil {
				if _, ok := r.(crash); !ok {
					panic(r)
				}
			}
		}()
		_ = l.Run(context.Background(), false)
		t.Fatal("the run did not reach the fault point")
	}()
	return base, pol
}

// metricsOf reads the run's metrics lines as maps.
func metricsOf(t *testing.T, base string) []map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(base, "r", "metrics.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]any
	for i, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("metrics line %d: %v", i+1, err)
		}
		out = append(out, m)
	}
	return out
}

// Item 1 of issue 27: without SFT the step-0 evaluation follows the step-0
// checkpoint, which does not cover it; a kill before the next checkpoint
// and a resume wrote a second "phase: init" line.
func TestResumeWritesTheInitEvaluationOnce(t *testing.T) {
	base, pol := crashAt(t, 3, "before_sample", 2, nil)
	if err := resumeRun(t, base, 3, pol, func(l *Loop) { l.cfg.CheckpointEvery = 0 }); err != nil {
		t.Fatal(err)
	}
	var inits, steps, evals int
	for _, m := range metricsOf(t, base) {
		switch {
		case m["kind"] == "eval" && m["phase"] == "init":
			inits++
		case m["kind"] == "eval":
			evals++
		case m["kind"] == "step":
			steps++
		}
	}
	// steps 1..3, one init evaluation and the final one at step 3.
	if inits != 1 || steps != 3 || evals != 1 {
		t.Fatalf("init evals %d, step lines %d, other evals %d; want 1, 3, 1", inits, steps, evals)
	}
}

// resumeRepair is resumeRun with --repair.
func resumeRepair(t *testing.T, base string, steps int, p trainer.Policy) error {
	return resumeRun(t, base, steps, p, func(l *Loop) { l.repair = true })
}

// Item 3 of issue 27: the checkpoint covers the metrics lines it saw (count
// and sha256); a log changed under it is refused, naming the file, instead
// of resumed with lines lost, doubled or altered.
func TestResumeVerifiesTheMetricsLog(t *testing.T) {
	lines := func(s string) []string { return strings.SplitAfter(strings.TrimSuffix(s, "\n"), "\n") }
	cases := map[string]func(string) string{
		"deleted": nil,
		"emptied": func(string) string { return "" },
		"truncated mid-file": func(s string) string {
			return s[:len(s)/2]
		},
		"middle line deleted": func(s string) string {
			l := lines(s)
			return strings.Join(append(l[:2:2], l[3:]...), "") + "\n"
		},
		"middle line duplicated": func(s string) string {
			l := lines(s)
			return strings.Join(append(l[:3:3], l[2:]...), "") + "\n"
		},
		"digit flipped in valid JSON": func(s string) string {
			return strings.Replace(s, `"step":2,`, `"step":3,`, 1)
		},
	}
	for name, damage := range cases {
		t.Run(name, func(t *testing.T) {
			base, pol := baseRun(t, 3)
			path := filepath.Join(base, "r", "metrics.jsonl")
			if damage == nil {
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
			} else {
				edit(t, path, damage)
			}
			before, _ := os.ReadFile(path)
			err := resumeRun(t, base, 4, pol, nil)
			if err == nil || !strings.Contains(err.Error(), "metrics.jsonl") || !strings.Contains(err.Error(), "--repair") {
				t.Fatalf("got %v, want a refusal naming metrics.jsonl and --repair", err)
			}
			if after, _ := os.ReadFile(path); string(after) != string(before) {
				t.Fatal("a refused resume changed the metrics log")
			}
		})
	}
}

// The lines after the checkpoint (the steps a kill lost) are cut, and the
// lines it covers kept: the resumed log equals an uninterrupted run's.
func TestResumeCutsOnlyUncoveredMetricsLines(t *testing.T) {
	ref, _ := baseRun(t, 3)
	want := stripTimes(metricsOf(t, ref))
	base, pol := crashAt(t, 3, "before_sample", 3, func(c *Config) { c.CheckpointEvery = 1 })
	if err := resumeRun(t, base, 3, pol, nil); err != nil {
		t.Fatal(err)
	}
	if got := stripTimes(metricsOf(t, base)); !reflect.DeepEqual(got, want) {
		t.Fatalf("resumed log differs from the uninterrupted run:\n got %v\nwant %v", got, want)
	}
}

// With --repair a log truncated after the lines of step 1 resumes from the
// newest checkpoint it is intact for, and ends equal to an uninterrupted run.
func TestResumeRepairFallsBackToAnIntactMetricsLog(t *testing.T) {
	ref, _ := baseRun(t, 3)
	want := stripTimes(metricsOf(t, ref))
	base, pol := baseRun(t, 3)
	// Lines: init eval, step 1, step 2, step 3, eval 3: keep up to step 1.
	edit(t, filepath.Join(base, "r", "metrics.jsonl"), func(s string) string {
		l := strings.SplitAfter(s, "\n")
		return strings.Join(l[:2], "") + l[2][:10]
	})
	if err := resumeRun(t, base, 3, pol, nil); err == nil {
		t.Fatal("a truncated log was resumed without --repair")
	}
	if err := resumeRepair(t, base, 3, pol); err != nil {
		t.Fatal(err)
	}
	if got := stripTimes(metricsOf(t, base)); !reflect.DeepEqual(got, want) {
		t.Fatalf("repaired run's log differs from the uninterrupted run:\n got %v\nwant %v", got, want)
	}
	if r := repairReportOf(t, base); !strings.Contains(r, "redone") {
		t.Fatalf("repair report %s does not say that steps are redone", r)
	}
}

func stripTimes(ms []map[string]any) []map[string]any {
	for _, m := range ms {
		for k := range m {
			if strings.HasPrefix(k, "t_") || k == "cache_hits" || k == "dedup_hits" || k == "time" || k == "elapsed_s" {
				delete(m, k)
			}
		}
	}
	return ms
}

// Item 6 of issue 27: one damaged early ledger file invalidated every
// checkpoint ("no valid checkpoint"). The refusal now names --repair, which
// continues from the newest checkpoint, sets the file aside and reports the
// lost steps.
func TestResumeRepairSetsADamagedLedgerAside(t *testing.T) {
	base, pol := baseRun(t, 3)
	ledger := filepath.Join(base, "r", "ledger", rundir.LedgerName(1, 1))
	edit(t, ledger, func(s string) string { return s[:len(s)-5] + "xxxxx" })
	err := resumeRun(t, base, 4, pol, nil)
	if err == nil || !strings.Contains(err.Error(), "--repair") {
		t.Fatalf("got %v, want a refusal that names --repair", err)
	}
	if err := resumeRepair(t, base, 4, pol); err != nil {
		t.Fatal(err)
	}
	if pol.loads[len(pol.loads)-1] != ckptName(t, base, 3) {
		t.Fatalf("loaded %v, want the newest checkpoint (step 3)", pol.loads)
	}
	if _, err := os.Stat(ledger + ".damaged"); err != nil {
		t.Fatalf("damaged ledger not set aside: %v", err)
	}
	if r := repairReportOf(t, base); !strings.Contains(r, "steps 1..1") {
		t.Fatalf("repair report %s does not name the lost steps 1..1", r)
	}
	// The next resume is clean: the new checkpoint does not cover the damaged file.
	if err := resumeRun(t, base, 5, pol, nil); err != nil {
		t.Fatalf("resume after the repair: %v", err)
	}
}

// repairReportOf is the run's one repair-N.json.
func repairReportOf(t *testing.T, base string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(base, "r", "repair-*.json"))
	if len(m) != 1 {
		t.Fatalf("repair reports %v, want one", m)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
