package progress

import (
	"bytes"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/progress/progresstest"
)

// fakeClock is a clock that moves only when told.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fakeClock { return &fakeClock{t: time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// lineLogger is a text logger writing through out, without the time
// attribute (the fake clock is not slog's).
func lineLogger(out *Output) *slog.Logger {
	return slog.New(slog.NewTextHandler(out, &slog.HandlerOptions{
		ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == slog.TimeKey {
				return slog.Attr{}
			}
			return a
		},
	}))
}

func TestLinesOffTerminal(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, false)
	clk := newClock()
	const n, per = 10000, 7 * time.Millisecond // 70 s in all
	b := New(out, Options{Label: "eval", Unit: "turn", Total: n, Logger: lineLogger(out), Now: clk.now})
	for i := 1; i <= n; i++ {
		clk.add(per)
		b.Update(i, "")
	}
	b.Finish()
	s := buf.String()
	if strings.ContainsAny(s, "\r\x1b") {
		t.Fatalf("carriage return or escape code off a terminal:\n%q", s)
	}
	lines := strings.Split(strings.TrimSuffix(s, "\n"), "\n")
	// a line per 10% (10), and one per 30 s between them at most (70 s: 2)
	if len(lines) < 10 || len(lines) > 12 {
		t.Fatalf("%d lines for %d items, want 10..12:\n%s", len(lines), n, s)
	}
	re := regexp.MustCompile(`^level=INFO msg="eval progress" done=(\d+) total=10000 pct=\d+ elapsed=\S+ eta=\S+`)
	for _, l := range lines {
		if !re.MatchString(l) {
			t.Errorf("line lacks done/total, elapsed, eta: %q", l)
		}
	}
	if !strings.Contains(lines[len(lines)-1], "done=10000 ") {
		t.Errorf("last line is not the total: %q", lines[len(lines)-1])
	}
	// At 5000 of 10000, 7 ms each: 35 s elapsed, 35 s left, 1/0.007 = 142.86 a second.
	want := `msg="eval progress" done=5000 total=10000 pct=50 elapsed=35s eta=35s rate="143 turn/s"`
	if !strings.Contains(s, want) {
		t.Errorf("no line %s in:\n%s", want, s)
	}
}

func TestLinesEveryIntervalWhenSlow(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, false)
	clk := newClock()
	// 1000 items, 100 ms each: 10% is 10 s; the 30 s interval never fires
	// before a 10% tick, so exactly 10 lines.
	b := New(out, Options{Label: "x", Total: 1000, Logger: lineLogger(out), Now: clk.now})
	for i := 1; i <= 1000; i++ {
		clk.add(100 * time.Millisecond)
		b.Update(i, "")
	}
	if got := strings.Count(buf.String(), "\n"); got != 10 {
		t.Errorf("%d lines, want 10:\n%s", got, buf.String())
	}
	// 200 items over 1000 s: a 10% tick every 100 s, and a line every 30 s
	// between: ~33 lines plus at most the 10 ticks.
	buf.Reset()
	b = New(out, Options{Label: "x", Total: 200, Logger: lineLogger(out), Now: clk.now})
	for i := 1; i <= 200; i++ {
		clk.add(5 * time.Second)
		b.Update(i, "")
	}
	if got := strings.Count(buf.String(), "\n"); got < 33 || got > 43 {
		t.Errorf("%d lines over 1000 s, want a line every 30 s or 10%% (33..43)", got)
	}
}

func TestNoLinesForWorkUnderASecond(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, false)
	clk := newClock()
	b := New(out, Options{Label: "x", Total: 1000, Logger: lineLogger(out), Now: clk.now})
	for i := 1; i <= 1000; i++ {
		clk.add(time.Millisecond / 2)
		b.Update(i, "")
	}
	b.Finish()
	if buf.Len() != 0 {
		t.Errorf("lines for work done in 0.5 s:\n%s", buf.String())
	}
}

func TestStoppedRunLogsWhereItStopped(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, false)
	clk := newClock()
	b := New(out, Options{Label: "x", Total: 100, Logger: lineLogger(out), Now: clk.now})
	for i := 1; i <= 15; i++ {
		clk.add(time.Second)
		b.Update(i, "")
	}
	b.Finish() // stopped at 15 of 100: lines at 10 and 15
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 || !strings.Contains(lines[0], "done=10 ") || !strings.Contains(lines[1], "done=15 total=100 ") {
		t.Errorf("want lines at 10 and 15 of 100, got:\n%s", buf.String())
	}
}

func TestRateWaitsUntilMeaningful(t *testing.T) {
	clk := newClock()
	m := NewMeter(0, 600, clk.now)
	clk.add(3500 * time.Nanosecond) // the first turn, 3.5 µs in
	if r, ok := m.Rate(1); ok {
		t.Errorf("rate %g shown after one item in 3.5 µs", r)
	}
	if _, ok := m.ETA(1); ok {
		t.Error("ETA shown after one item")
	}
	clk.add(time.Second)
	if _, ok := m.Rate(2); ok {
		t.Error("rate shown after two items")
	}
	r, ok := m.Rate(4)
	if !ok || r < 3.99 || r > 4.0 { // 4 items in 1.0000035 s
		t.Errorf("rate %g (%v), want ~4/s", r, ok)
	}
	// A resumed run: 16 steps were done before; 4 more in 8 s is 2 s a step,
	// and 10 steps left take 20 s.
	clk2 := newClock()
	m = NewMeter(16, 30, clk2.now)
	clk2.add(8 * time.Second)
	if r, _ := m.Rate(20); r != 0.5 {
		t.Errorf("resumed rate %g, want 0.5/s (the earlier steps are not this session's)", r)
	}
	if eta, _ := m.ETA(20); eta != 20*time.Second {
		t.Errorf("resumed ETA %v, want 20s", eta)
	}
	for _, c := range []struct {
		perSec float64
		want   string
	}{{0.5, "2 s/step"}, {1 / 3600.0, "3600 s/step"}, {43391.7, "43392 step/s"}, {23.84, "23.8 step/s"}, {2.4151, "2.42 step/s"}} {
		if got := FormatRate(c.perSec, "step"); got != c.want {
			t.Errorf("FormatRate(%g) = %q, want %q", c.perSec, got, c.want)
		}
	}
}

var countRe = regexp.MustCompile(`\((\d+)/(\d+)`)

// writes records every Write call.
type writes struct{ calls []string }

func (w *writes) Write(p []byte) (int, error) {
	w.calls = append(w.calls, string(p))
	return len(p), nil
}

func TestLabelAndCounterAgree(t *testing.T) {
	w := &writes{}
	out := NewOutput(w, true)
	clk := newClock()
	b := New(out, Options{Label: "grpo", Unit: "step", Total: 30, Done: 5, Now: clk.now})
	for step := 6; step < 30; step++ {
		clk.add(10 * time.Millisecond) // under the redraw interval: the label change draws
		w.calls = nil
		b.Update(step, fmt.Sprintf("step %d", step))
		// one write a draw, so a terminal never shows a frame between the
		// count's update and the label's
		if len(w.calls) != 1 {
			t.Fatalf("step %d: %d writes, want 1", step, len(w.calls))
		}
		sc := progresstest.Screen(w.calls[0])
		last := sc[len(sc)-1]
		m := countRe.FindStringSubmatch(last)
		if m == nil || !strings.HasPrefix(last, fmt.Sprintf("grpo step %d | ", step)) || m[1] != fmt.Sprint(step) || m[2] != "30" {
			t.Fatalf("step %d: bar shows %q", step, last)
		}
	}
	b.Finish()
}

func TestLogLineDuringBarIsIntact(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, true)
	log := lineLogger(out)
	clk := newClock()
	b := New(out, Options{Label: "eval", Unit: "turn", Total: 100, Now: clk.now})
	for i := 1; i <= 50; i++ {
		clk.add(50 * time.Millisecond)
		b.Update(i, "")
		if i%10 == 0 {
			log.Info("checkpoint written", "step", i)
		}
	}
	sc := progresstest.Screen(buf.String())
	var logs int
	for _, l := range sc[:len(sc)-1] {
		if strings.Contains(l, "msg=") {
			logs++
			if !regexp.MustCompile(`^level=INFO msg="checkpoint written" step=\d+$`).MatchString(l) {
				t.Errorf("log line broken by the bar: %q", l)
			}
		}
	}
	if logs != 5 {
		t.Errorf("%d intact log lines, want 5; screen:\n%s", logs, strings.Join(sc, "\n"))
	}
	last := sc[len(sc)-1]
	if !strings.Contains(last, "(50/100") {
		t.Errorf("bar not redrawn below the log lines: last line %q", last)
	}
	b.Finish()
	if sc := progresstest.Screen(buf.String()); sc[len(sc)-1] != "" {
		t.Errorf("bar left on screen after Finish: %q", sc[len(sc)-1])
	}
}

func TestRateShownOnBarOnlyWhenMeaningful(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, true)
	clk := newClock()
	b := New(out, Options{Label: "eval", Unit: "turn", Total: 600, Now: clk.now})
	clk.add(3500 * time.Nanosecond)
	b.Update(1, "")
	sc := progresstest.Screen(buf.String())
	if l := sc[len(sc)-1]; strings.Contains(l, "turn/s") || strings.Contains(l, "ETA") {
		t.Errorf("rate or ETA after one turn: %q", l)
	}
	clk.add(2 * time.Second)
	b.Update(101, "")
	sc = progresstest.Screen(buf.String())
	// 101 turns in 2.0000035 s: 50.5 a second; 499 left: 9.9 s
	if l := sc[len(sc)-1]; !strings.Contains(l, "eval | 2s, ETA 9.9s, 50.5 turn/s ") {
		t.Errorf("bar lacks elapsed 2s, ETA 9.9s and rate 50.5 turn/s: %q", l)
	}
	// the library's own [elapsed:left] counts from its first render
	if l := sc[len(sc)-1]; regexp.MustCompile(`\[\S*:\S*\]`).MatchString(l) {
		t.Errorf("library's time estimate shown: %q", l)
	}
	b.Finish()
}

func TestConcurrentLogsAndUpdates(t *testing.T) {
	var buf bytes.Buffer
	out := NewOutput(&buf, true)
	log := lineLogger(out)
	b := New(out, Options{Label: "eval", Total: 400})
	var wg sync.WaitGroup
	var mu sync.Mutex
	done := 0
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 100; i++ {
				mu.Lock()
				done++
				b.Update(done, "")
				mu.Unlock()
				if i%25 == 0 {
					log.Info("tick", "g", g)
				}
			}
		})
	}
	wg.Wait()
	b.Finish()
	n := 0
	for _, l := range progresstest.Screen(buf.String()) {
		if strings.Contains(l, "msg=tick") {
			n++
			if !regexp.MustCompile(`^level=INFO msg=tick g=\d$`).MatchString(l) {
				t.Errorf("broken line %q", l)
			}
		}
	}
	if n != 16 {
		t.Errorf("%d log lines, want 16", n)
	}
}

// A label too long for the terminal is cut so that the whole bar fits one
// line: 80 columns, a total of 30 (2 digits): room for 80-4-20 = 56.
func TestFitKeepsTheBarOnOneLine(t *testing.T) {
	long := strings.Repeat("x", 100)
	if got := fit(long, 80, 30); len([]rune(got)) != 56 || !strings.HasSuffix(got, "…") {
		t.Errorf("fit to 80 columns: %d runes %q", len([]rune(got)), got)
	}
	if got := fit("grpo step 3", 80, 30); got != "grpo step 3" {
		t.Errorf("short label changed: %q", got)
	}
	if got := fit(long, 0, 30); got != long {
		t.Error("label cut with the width unknown")
	}
}
