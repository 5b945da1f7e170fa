package main

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/progress"
	"github.com/himes-rl/himes/internal/progress/progresstest"
)

type stepClock struct{ t time.Time }

func (c *stepClock) now() time.Time { return c.t }

func f64(v float64) *float64 { return &v }

// A resumed run (16 of 30 steps done): the bar's label names the step its
// counter shows, at every step, and an evaluation and a log line printed
// meanwhile stay whole above it.
func TestTrainBarLabelMatchesCounter(t *testing.T) {
	var buf bytes.Buffer
	out := progress.NewOutput(&buf, true)
	clk := &stepClock{t: time.Unix(1e9, 0)}
	p := newProgress(out, clk.now)
	p.Start(16, 30)
	log := slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	count := regexp.MustCompile(`\((\d+)/30\)`)
	for step := 17; step < 30; step++ {
		clk.t = clk.t.Add(2 * time.Second)
		p.Step(grpo.StepMetrics{Step: step, RewardMean: f64(0.5)})
		sc := progresstest.Screen(buf.String())
		last := sc[len(sc)-1]
		m := count.FindStringSubmatch(last)
		if !strings.HasPrefix(last, fmt.Sprintf("grpo step %d  reward 0.500 | ", step)) || m == nil || m[1] != fmt.Sprint(step) {
			t.Fatalf("step %d: bar %q", step, last)
		}
		if step == 20 {
			// 4 steps of this session in 8 s: 2 s a step, 10 steps left
			if !strings.Contains(last, "| 8s, ETA 20s, 2 s/step ") {
				t.Errorf("step 20: bar lacks 8s elapsed, ETA 20s, 2 s/step: %q", last)
			}
			p.Eval(grpo.EvalMetrics{Step: 20, Phase: "grpo", Turns: 10, Compared: 10,
				Policy: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.61}}, Raw: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.52}}})
			log.Info("checkpoint saved", "step", 20)
		}
	}
	p.Finish()
	sc := progresstest.Screen(buf.String())
	want := []string{"eval @ step 20 (grpo): reward 0.6100 (raw question 0.5200)", `level=INFO msg="checkpoint saved" step=20`}
	var got []string
	for _, l := range sc {
		if strings.HasPrefix(l, "eval @") || strings.HasPrefix(l, "level=") {
			got = append(got, l)
		}
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("lines above the bar:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if sc[len(sc)-1] != "" {
		t.Errorf("bar left after Finish: %q", sc[len(sc)-1])
	}
}

// Off a terminal, each step's line carries the elapsed time and the ETA of
// this session's steps, and no bar.
func TestTrainLinesCarryElapsedAndETA(t *testing.T) {
	var buf bytes.Buffer
	clk := &stepClock{t: time.Unix(1e9, 0)}
	p := &logProgress{log: slog.New(slog.NewTextHandler(&buf, nil)), now: clk.now}
	p.Start(0, 10)
	for step := 1; step <= 4; step++ {
		clk.t = clk.t.Add(3 * time.Second)
		p.Step(grpo.StepMetrics{Step: step, RewardMean: f64(0.25), StepSeconds: 3})
	}
	p.Finish()
	s := buf.String()
	if strings.ContainsAny(s, "\r\x1b") {
		t.Fatalf("bar output off a terminal: %q", s)
	}
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) != 5 {
		t.Fatalf("%d lines, want 4 steps and the end:\n%s", len(lines), s)
	}
	// steps 1-2: too few for a rate; step 4: 12 s for 4 steps, 6 left = 18 s
	for i, want := range []string{
		"msg=step step=1 of=10 reward=0.25 failed=0 step_s=3 elapsed=3s eta=unknown",
		"msg=step step=3 of=10 reward=0.25 failed=0 step_s=3 elapsed=9s eta=21s rate=\"3 s/step\"",
		"msg=step step=4 of=10 reward=0.25 failed=0 step_s=3 elapsed=12s eta=18s rate=\"3 s/step\"",
		"msg=\"training finished\" elapsed_s=12",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("want %d %q in:\n%s", i, want, s)
		}
	}
}
