package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// chromium returns headless Chromium's path: the test is skipped with the
// reason without it, and fails under CI=true (scripts/ci/setup-chromium.sh).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "SKIP: no chromium on PATH: apt-get install chromium (scripts/ci/setup-chromium.sh) to test the live report in a browser"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

// browse loads page in headless Chromium and returns the DOM it rendered;
// with png set it also saves a screenshot there.
func browse(t *testing.T, bin, page, png string) string {
	t.Helper()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
		"--user-data-dir=" + t.TempDir(), "--window-size=1280,1400"}
	url := "file://" + page
	if png != "" {
		out, err := exec.Command(bin, append(args, "--screenshot="+png, url)...).CombinedOutput()
		if st, serr := os.Stat(png); err != nil || serr != nil || st.Size() == 0 {
			t.Fatalf("chromium screenshot: %v %v\n%s", err, serr, out)
		}
	}
	var stderr bytes.Buffer
	cmd := exec.Command(bin, append(args, "--dump-dom", url)...)
	cmd.Stderr = &stderr
	dom, err := cmd.Output()
	if err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	return string(dom)
}

var shownStep = regexp.MustCompile(`data-run="w" data-step="(\d+)"`)

// stepShown is the step the rendered report shows for run "w" (-1: none yet).
func stepShown(dom string) int {
	m := shownStep.FindStringSubmatch(dom)
	if m == nil {
		return -1
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// TestReportWatchInChromium follows a training run with `himes report
// --watch` and looks at report.html in headless Chromium: while the run
// trains, the page reloads itself and the step it shows advances; once the
// run is interrupted, watch writes the final report (no reload) and exits.
// Screenshots go to $HIMES_SCREENSHOTS when set.
func TestReportWatchInChromium(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): trains and drives a browser")
	}
	bin := chromium(t)
	dir := t.TempDir()
	demo := filepath.Join(sharedtest.RepoRoot(t), "datasets", "demo")
	// Long enough that the test stops it (SIGINT) rather than waiting for the end.
	cfg := fmt.Sprintf(`run: {name: w, output_dir: %q, seed: 1}
data: {train: %q, eval: %q, kb: %q, user_field: conv_id}
reward: {hit: gold}
grpo: {steps: 100000, prompts_per_step: 16, group_size: 8, learning_rate: 0.1, eval_every: 40, eval_turns: 20, checkpoint_every: 40, keep_checkpoints: 1}
`, dir, filepath.Join(demo, "train.jsonl"), filepath.Join(demo, "eval.jsonl"), filepath.Join(demo, "passages.jsonl"))
	cfgPath := filepath.Join(dir, "w.yaml")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	shots := os.Getenv("HIMES_SCREENSHOTS")
	if shots == "" {
		shots = t.TempDir()
	}
	runDir, out := filepath.Join(dir, "w"), filepath.Join(dir, "live")
	page := filepath.Join(out, "report.html")

	start := func(args ...string) (*exec.Cmd, *bytes.Buffer, chan error) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), "HIMES_TEST_MAIN=1", "CI=true")
		var buf bytes.Buffer
		cmd.Stdout, cmd.Stderr = &buf, &buf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		return cmd, &buf, done
	}
	// Watch first: it waits for the run to write its first metrics.
	watch, watchOut, watchDone := start("report", "--watch", "--interval", "1s", runDir, "--out", out)
	train, trainOut, trainDone := start("train", "--config", cfgPath)
	defer func() {
		for _, c := range []*exec.Cmd{train, watch} {
			_ = c.Process.Kill()
		}
	}()

	// poll waits for cond while training goes on; the run's own end or
	// the test binary's deadline stop it.
	poll := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			select {
			case err := <-trainDone:
				t.Fatalf("training ended (%v) before %s\n%s\nwatch:\n%s", err, what, trainOut, watchOut)
			case err := <-watchDone:
				t.Fatalf("watch ended (%v) before %s\n%s", err, what, watchOut)
			case <-time.After(300 * time.Millisecond):
			}
		}
	}
	var dom1 string
	s1 := -1
	poll("the report showed a step", func() bool {
		if _, err := os.Stat(page); err != nil {
			return false
		}
		dom1 = browse(t, bin, page, filepath.Join(shots, "live-1.png"))
		s1 = stepShown(dom1)
		return s1 >= 1
	})
	if !strings.Contains(dom1, `http-equiv="refresh" content="1"`) || !strings.Contains(dom1, "training: step") {
		t.Fatalf("a report of a run in progress must reload itself and say it trains:\n%.2000s", dom1)
	}
	var dom2 string
	s2 := -1
	poll("the step shown advanced", func() bool {
		dom2 = browse(t, bin, page, "")
		s2 = stepShown(dom2)
		return s2 > s1+5
	})
	browse(t, bin, page, filepath.Join(shots, "live-2.png"))
	t.Logf("step shown advanced from %d to %d; screenshots in %s", s1, s2, shots)

	// Interrupt the run: it checkpoints and records "interrupted"; watch
	// writes the final report without the reload and exits by itself.
	if err := train.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if err := <-trainDone; err == nil {
		t.Fatalf("an interrupted run exits non-zero\n%s", trainOut)
	}
	if err := <-watchDone; err != nil {
		t.Fatalf("watch: %v\n%s", err, watchOut)
	}
	final := browse(t, bin, page, filepath.Join(shots, "live-final.png"))
	if strings.Contains(final, `http-equiv="refresh"`) || !strings.Contains(final, "interrupted: step") || stepShown(final) < s2 {
		t.Fatalf("final report:\n%.1500s\ntrain:\n%s\nwatch:\n%s", final, lastLines(trainOut.String(), 8), lastLines(watchOut.String(), 8))
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
