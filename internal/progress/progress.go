// Package progress shows how far a long command got: a
// github.com/schollz/progressbar/v3 bar on a terminal, and a few quiet log
// lines (done/total, elapsed, ETA) anywhere else (CI, files, pipes).
//
// Output is the one writer of a command's stderr: log lines written through
// it clear the bar first and redraw it after, so a log line never lands
// inside the bar. Bar draws its counter and its label in one step, so the
// two always agree, and shows a rate and an ETA only once they mean
// something (a few items and a second in).
package progress

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Output is a command's stderr, shared by its log lines and its bar.
type Output struct {
	mu       sync.Mutex
	w        io.Writer
	terminal bool
	bar      *Bar // the bar on screen; nil when none
	midLine  bool // a write left the cursor mid-line: do not draw yet
}

// NewOutput wraps w; terminal says whether bars may be drawn on it.
func NewOutput(w io.Writer, terminal bool) *Output {
	return &Output{w: w, terminal: terminal}
}

// Terminal reports whether bars are drawn (otherwise progress is log lines).
func (o *Output) Terminal() bool { return o.terminal }

// columns is the terminal's width, 0 when unknown.
func (o *Output) columns() int {
	f, ok := o.w.(*os.File)
	if !ok {
		return 0
	}
	w, _, err := term.GetSize(int(f.Fd()))
	if err != nil {
		return 0
	}
	return w
}

// fit shortens a bar's label to leave room on a line of cols columns for
// the percentage, the bar and the count (a line that wraps cannot be
// cleared, and the next draw would stack below it). cols 0: unknown.
func fit(label string, cols, total int) string {
	if cols <= 0 {
		return label
	}
	room := cols - 2*len(strconv.Itoa(total)) - 20 // " 100% |…| (n/total) "
	r := []rune(label)
	if room < 10 || len(r) <= room {
		return label
	}
	return string(r[:room-1]) + "…"
}

// Write writes p (a log line, as slog handlers write one record a call)
// above the bar: the bar is cleared, p written, and the bar redrawn once
// the line is complete.
func (o *Output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.bar != nil && !o.midLine {
		_ = o.bar.bar.Clear()
		o.flush()
	}
	n, err := o.w.Write(p)
	if len(p) > 0 {
		o.midLine = p[len(p)-1] != '\n'
	}
	if o.bar != nil && !o.midLine {
		_ = o.bar.bar.RenderBlank()
		o.flush()
	}
	return n, err
}

// flush writes what the bar on screen rendered since the last flush in one
// write, so a terminal never shows a half-drawn bar. Called with o.mu held.
func (o *Output) flush() {
	if o.bar != nil && o.bar.frame.Len() > 0 {
		_, _ = o.w.Write(o.bar.frame.Bytes())
		o.bar.frame.Reset()
	}
}

type ctxKey struct{}

// NewContext returns ctx carrying o, so a command finds the Output its
// logger writes to.
func NewContext(ctx context.Context, o *Output) context.Context {
	return context.WithValue(ctx, ctxKey{}, o)
}

// FromContext returns the Output in ctx, or nil.
func FromContext(ctx context.Context) *Output {
	o, _ := ctx.Value(ctxKey{}).(*Output)
	return o
}

// Options describe one count toward a total.
type Options struct {
	// Label names the work ("eval", "index build: analyze"); off a
	// terminal it is the log message, with " progress" appended.
	Label string
	// Unit is one item, singular ("turn", "step", "chunk").
	Unit string
	// Total is the number of items (> 0).
	Total int
	// Done items were done before this session (a resumed run): shown,
	// but not counted in the rate.
	Done int
	// Percent is the step between log lines off a terminal (default 10).
	Percent int
	// Interval is the most time between log lines off a terminal while
	// items get done (default 30 s).
	Interval time.Duration
	// EachItem logs a line at every update off a terminal, for slow items.
	EachItem bool
	// Logger receives the lines off a terminal (nil: slog.Default()).
	Logger *slog.Logger
	// Now is the clock (nil: time.Now); tests pass a fake one.
	Now func() time.Time
}

// minItems and minTime are how much progress a rate needs before it is
// shown: the first item alone, a few microseconds after the start, would
// read as hundreds of thousands a second.
const (
	minItems = 3
	minTime  = time.Second
	redraw   = 100 * time.Millisecond // least time between two draws
)

// Meter times a count toward a total: elapsed time, rate, ETA.
type Meter struct {
	now   func() time.Time
	start time.Time
	base  int // done at the start: not part of the rate
	total int
}

// NewMeter starts timing now, with done of total items already done.
func NewMeter(done, total int, now func() time.Time) *Meter {
	if now == nil {
		now = time.Now
	}
	return &Meter{now: now, start: now(), base: done, total: total}
}

// Elapsed is the time since the meter started.
func (m *Meter) Elapsed() time.Duration { return m.now().Sub(m.start) }

// Rate is items a second over this session, and whether it is meaningful
// yet (at least minItems items and minTime).
func (m *Meter) Rate(done int) (float64, bool) {
	el, n := m.Elapsed(), done-m.base
	if n < minItems || el < minTime {
		return 0, false
	}
	return float64(n) / el.Seconds(), true
}

// ETA is the time left at the session's rate, when the rate is meaningful.
func (m *Meter) ETA(done int) (time.Duration, bool) {
	if done >= m.total {
		return 0, true
	}
	r, ok := m.Rate(done)
	if !ok {
		return 0, false
	}
	return time.Duration(float64(m.total-done) / r * float64(time.Second)), true
}

// Attrs are the slog attributes of the timing: elapsed, eta ("unknown"
// until the rate is meaningful) and rate when known.
func (m *Meter) Attrs(done int, unit string) []any {
	a := []any{"elapsed", FormatDuration(m.Elapsed())}
	if eta, ok := m.ETA(done); ok {
		a = append(a, "eta", FormatDuration(eta))
	} else {
		a = append(a, "eta", "unknown")
	}
	if r, ok := m.Rate(done); ok {
		a = append(a, "rate", FormatRate(r, unit))
	}
	return a
}

// text is the timing as the bar shows it: "12s, ETA 40s, 3.2 s/step".
func (m *Meter) text(done int, unit string) string {
	s := FormatDuration(m.Elapsed())
	if eta, ok := m.ETA(done); ok && done < m.total {
		s += ", ETA " + FormatDuration(eta)
	}
	if r, ok := m.Rate(done); ok {
		s += ", " + FormatRate(r, unit)
	}
	return s
}

// Seconds is d in seconds rounded to the millisecond, as the nearest
// float64 to that decimal, so logs print "2.728" and not the
// 2.7279999999999998 that Duration.Seconds of a rounded duration can give.
func Seconds(d time.Duration) float64 {
	return math.Round(d.Seconds()*1e3) / 1e3
}

// FormatDuration is short and steady: tenths of a second under 10 s,
// whole seconds above.
func FormatDuration(d time.Duration) string {
	if d < 10*time.Second {
		return d.Round(100 * time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

// FormatRate writes a rate per second as items a second, or seconds an
// item when below one ("48.8 turn/s", "3.2 s/step").
func FormatRate(perSec float64, unit string) string {
	if perSec >= 1 {
		return number(perSec) + " " + unit + "/s"
	}
	if perSec <= 0 {
		return "0 " + unit + "/s"
	}
	return number(1/perSec) + " s/" + unit
}

// number keeps three significant digits without an exponent (43400, not
// 4.34e+04).
func number(x float64) string {
	switch {
	case x >= 100:
		return strconv.FormatFloat(x, 'f', 0, 64)
	case x >= 10:
		return strconv.FormatFloat(x, 'f', 1, 64)
	default:
		return fmt.Sprintf("%.3g", x)
	}
}

// Bar shows one count toward a total on an Output.
type Bar struct {
	mu     sync.Mutex
	out    *Output
	opt    Options
	meter  *Meter
	log    *slog.Logger
	bar    *progressbar.ProgressBar // on a terminal
	frame  bytes.Buffer             // what bar rendered, until the Output flushes it
	done   int
	detail string
	// drawing and logging state
	lastDraw   time.Time
	lastLine   time.Time
	lastTick   int
	loggedDone int
	finished   bool
}

// New starts a bar for opt on out: drawn at once on a terminal, silent
// until its first line otherwise.
func New(out *Output, opt Options) *Bar {
	if opt.Percent <= 0 {
		opt.Percent = 10
	}
	if opt.Interval <= 0 {
		opt.Interval = 30 * time.Second
	}
	if opt.Now == nil {
		opt.Now = time.Now
	}
	if opt.Unit == "" {
		opt.Unit = "item"
	}
	b := &Bar{out: out, opt: opt, meter: NewMeter(opt.Done, opt.Total, opt.Now), log: opt.Logger,
		done: opt.Done, loggedDone: opt.Done}
	if b.log == nil {
		b.log = slog.Default()
	}
	b.lastLine = b.meter.start
	b.lastTick = b.tick(opt.Done)
	if out.terminal && opt.Total > 0 {
		b.bar = progressbar.NewOptions(opt.Total,
			progressbar.OptionSetWriter(&b.frame),
			progressbar.OptionSetDescription(opt.Label),
			progressbar.OptionShowCount(),
			progressbar.OptionSetItsString(opt.Unit),
			// the rate and ETA are the Meter's: the library's would count a
			// resumed run's earlier steps, and time from the first item
			progressbar.OptionSetPredictTime(false),
			progressbar.OptionThrottle(0), // Bar throttles, so label and count are drawn together
			progressbar.OptionClearOnFinish(),
		)
		b.mu.Lock()
		b.draw()
		b.mu.Unlock()
	}
	return b
}

// Update records done items and the detail shown beside the label (on a
// terminal; "" for none), and draws or logs when due. attrs are added to
// the log line off a terminal.
func (b *Bar) Update(done int, detail string, attrs ...any) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	changed := detail != b.detail
	b.done, b.detail = done, detail
	now := b.opt.Now()
	if b.bar != nil {
		if changed || done >= b.opt.Total || now.Sub(b.lastDraw) >= redraw {
			b.draw()
		}
		return
	}
	t := b.tick(done)
	if !b.opt.EachItem && now.Sub(b.meter.start) < minTime {
		return // work done within a second needs no progress lines
	}
	if b.opt.EachItem || t > b.lastTick || (done >= b.opt.Total && b.loggedDone < done) ||
		(done > b.loggedDone && now.Sub(b.lastLine) >= b.opt.Interval) {
		b.lastTick = t
		b.line(attrs)
	}
}

// Finish ends the bar: cleared from a terminal; off one, a last line when
// an earlier line was logged and the last state was not (a run stopped
// before its total).
func (b *Bar) Finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.finished {
		return
	}
	b.finished = true
	if b.bar != nil {
		b.out.mu.Lock()
		if b.out.bar == b {
			_ = b.bar.Clear()
			b.out.flush()
			b.out.bar = nil
		}
		b.out.mu.Unlock()
		return
	}
	if b.loggedDone != b.done && !b.lastLine.Equal(b.meter.start) {
		b.line(nil)
	}
}

func (b *Bar) tick(done int) int {
	if b.opt.Total <= 0 {
		return 0
	}
	return done * 100 / b.opt.Total / b.opt.Percent
}

// line logs the state; called with b.mu held, never o.mu (the logger
// writes through the Output).
func (b *Bar) line(attrs []any) {
	b.lastLine, b.loggedDone = b.opt.Now(), b.done
	a := append([]any{}, attrs...)
	a = append(a, "done", b.done, "total", b.opt.Total)
	if b.opt.Total > 0 {
		a = append(a, "pct", b.done*100/b.opt.Total)
	}
	a = append(a, b.meter.Attrs(b.done, b.opt.Unit)...)
	b.log.Info(b.opt.Label+" progress", a...)
}

// draw sets the count, then the label: the label's render is the last, so
// what stays on screen has both from the same update. Called with b.mu held.
func (b *Bar) draw() {
	b.out.mu.Lock()
	defer b.out.mu.Unlock()
	if b.out.midLine {
		return // a partial line is on screen: the next update draws
	}
	if b.out.bar != b {
		if b.out.bar != nil { // a bar left unfinished: this one takes its line
			_ = b.out.bar.bar.Clear()
			b.out.flush()
		}
		b.out.bar = b
	}
	b.lastDraw = b.opt.Now()
	_ = b.bar.Set(b.done)
	b.bar.Describe(fit(b.describe(), b.out.columns(), b.opt.Total))
	b.out.flush()
	if b.done >= b.opt.Total {
		b.out.bar = nil // finished: the library has cleared it
	}
}

func (b *Bar) describe() string {
	var s bytes.Buffer
	s.WriteString(b.opt.Label)
	if b.detail != "" {
		s.WriteString(" " + b.detail)
	}
	s.WriteString(" | " + b.meter.text(b.done, b.opt.Unit))
	return s.String()
}
