package report

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/atomicfile"
)

func writeStatus(t *testing.T, dir, state string, pid int) {
	t.Helper()
	host, _ := os.Hostname()
	if err := atomicfile.WriteJSON(filepath.Join(dir, grpo.StatusFile), grpo.Status{State: state, Steps: 100, Host: host, PID: pid}); err != nil {
		t.Fatal(err)
	}
}

// deadPID is the pid of a process that has exited and been reaped.
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func TestProgressFromStatus(t *testing.T) {
	for _, c := range []struct {
		state    string
		pid      int
		live     bool
		progress string
	}{
		{grpo.StateRunning, os.Getpid(), true, "training: step 60 of 100"},
		{grpo.StateRunning, deadPID(t), false, "stopped without a final status"},
		{grpo.StateFinished, os.Getpid(), false, "finished: step 60 of 100"},
		{grpo.StateInterrupted, 0, false, "interrupted: step 60 of 100"},
	} {
		dir := filepath.Join(t.TempDir(), "run")
		writeRun(t, dir, 60, 0.004, "")
		writeStatus(t, dir, c.state, c.pid)
		r, err := LoadRun(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		s := Summarize(r)
		if s.InProgress != c.live || !strings.Contains(s.Progress, c.progress) {
			t.Errorf("%s (pid %d): in progress %v, %q; want %v, %q", c.state, c.pid, s.InProgress, s.Progress, c.live, c.progress)
		}
		var html strings.Builder
		if err := WriteHTML(&html, []Summary{s}, nil, 3*time.Second); err != nil {
			t.Fatal(err)
		}
		if got := strings.Contains(html.String(), `<meta http-equiv="refresh" content="3">`); got != c.live {
			t.Errorf("%s: reload tag present = %v, want %v", c.state, got, c.live)
		}
		// Without --watch nothing rewrites the page, so it never reloads.
		html.Reset()
		_ = WriteHTML(&html, []Summary{s}, nil, 0)
		if strings.Contains(html.String(), "http-equiv") {
			t.Errorf("%s: reload tag without a refresh interval", c.state)
		}
	}
}

func TestReportShowsNewestSamples(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "run")
	writeRun(t, dir, 30, 0.004, "")
	gold := "gold <b>rewrite</b>"
	for _, f := range []struct {
		name string
		step int
	}{{"step-000000-init.parquet", 0}, {"step-000000-sft.parquet", 0}, {"step-000025-grpo.parquet", 25}} {
		rows := []grpo.SampleRow{{Step: f.step, Phase: strings.TrimSuffix(strings.Split(f.name, "-")[2], ".parquet"), ConvID: "c1", Turn: 2,
			Question: "q " + f.name, PolicyRewrite: "rw", GoldRewrite: &gold, RetrievedIDs: []string{"p1", "p2"}, Answer: "a", Reference: "ref", Reward: fp(0.5)}}
		if err := grpo.WriteSamples(filepath.Join(dir, "samples", f.name), rows); err != nil {
			t.Fatal(err)
		}
	}
	res, err := Generate(context.Background(), []string{dir}, filepath.Join(dir, "report"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(res.HTML)
	html := string(b)
	for _, want := range []string{"Sample rewrites of run at step 25 (grpo)", "q step-000025-grpo.parquet", "gold &lt;b&gt;rewrite&lt;/b&gt;", "p1 · p2", "<td>0.500</td><td>–</td>"} {
		if !strings.Contains(html, want) {
			t.Errorf("report.html lacks %q", want)
		}
	}
	if strings.Contains(html, "q step-000000") {
		t.Error("report.html shows an older samples table")
	}
}

// A KL that no step computed is "–" in the table, not 0.000.
func TestNotComputedKLIsNotZero(t *testing.T) {
	r := Run{Name: "x"}
	for s := 1; s <= 10; s++ {
		r.Steps = append(r.Steps, grpo.StepMetrics{Step: s, RewardMean: fp(1)})
	}
	row := rows([]Summary{Summarize(r)})[0]
	if row.KL != "–" || row.RewardEnd != "1.000" {
		t.Fatalf("KL %q reward %q", row.KL, row.RewardEnd)
	}
}

// Watch rewrites the report as the run writes, reloading while it runs,
// and returns after the report that shows the run finished.
func TestWatchFollowsRunUntilFinished(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): follows a run being written for several refreshes")
	}
	dir := filepath.Join(t.TempDir(), "run")
	out := filepath.Join(t.TempDir(), "live")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	writeStatus(t, dir, grpo.StateRunning, os.Getpid())
	appendStep := func(step int) {
		f, err := os.OpenFile(filepath.Join(dir, MetricsFile), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(grpo.StepMetrics{Kind: "step", Step: step, RewardMean: fp(0.1 * float64(step))})
		_, _ = f.Write(append(b, '\n'))
		f.Close()
	}
	seen := make(chan Result, 100)
	done := make(chan error, 1)
	go func() {
		done <- Watch(context.Background(), []string{dir}, out, 5*time.Millisecond, func(r Result) { seen <- r })
	}()
	// No metrics yet: watch waits instead of failing.
	appendStep(1)
	r := <-seen
	if !r.InProgress || r.Steps[0] != 1 {
		t.Fatalf("first report: %+v", r)
	}
	appendStep(2)
	for r.Steps[0] != 2 {
		r = <-seen
	}
	b, _ := os.ReadFile(r.HTML)
	if !regexp.MustCompile(`http-equiv="refresh" content="1"`).Match(b) || !strings.Contains(string(b), `data-step="2"`) {
		t.Fatalf("live report:\n%.1500s", b)
	}
	appendStep(3)
	writeStatus(t, dir, grpo.StateFinished, os.Getpid())
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	close(seen)
	for x := range seen {
		r = x
	}
	b, _ = os.ReadFile(r.HTML)
	if r.InProgress || r.Steps[0] != 3 || strings.Contains(string(b), "http-equiv") || !strings.Contains(string(b), "finished: step 3 of 100") {
		t.Fatalf("final report %+v:\n%.1500s", r, b)
	}
}
