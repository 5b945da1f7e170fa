package report

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/atomicfile"
	"github.com/himes-rl/himes/internal/stats"
)

// Summary is the table row of one run.
type Summary struct {
	Name        string
	Dir         string
	Steps       int
	LastStep    int
	RewardStart float64 // mean reward over the first tenth of the steps
	RewardEnd   float64 // mean reward over the last tenth of the steps
	KLEnd       float64
	ZeroVarEnd  float64
	Evals       int
	// Final is the evaluation of the run's final policy: the best
	// checkpoint's when status.json says the run made it final
	// (grpo.load_best_at_end), else the last eval line; nil when none.
	Final *grpo.EvalMetrics
	// Checkpoint says which checkpoint Final is ("best: step 275,
	// eval.policy.recall_10 0.4390", or "latest: step 300").
	Checkpoint string
	Config     string
	// InProgress: status.json says running and the process is alive (or
	// on another host, where that cannot be checked).
	InProgress bool
	// Progress is one line on where the run stands (state, step, time).
	Progress string
	// Samples is the newest evaluation's samples table.
	Samples []grpo.SampleRow
}

// Summarize reduces a run to its table row. Start and end rewards average a
// tenth of the steps (at least one) so one noisy step does not decide them.
func Summarize(r Run) Summary {
	s := Summary{Name: r.Name, Dir: r.Dir, Steps: len(r.Steps), Evals: len(r.Evals), Config: r.Config}
	if n := len(r.Steps); n > 0 {
		k := max(1, n/10)
		s.LastStep = r.Steps[n-1].Step
		reward := func(m grpo.StepMetrics) float64 { return grpo.Val(m.RewardMean) }
		s.RewardStart = meanOf(r.Steps[:k], reward)
		tail := r.Steps[n-k:]
		s.RewardEnd = meanOf(tail, reward)
		s.KLEnd = meanOf(tail, func(m grpo.StepMetrics) float64 { return grpo.Val(m.KL) })
		s.ZeroVarEnd = meanOf(tail, func(m grpo.StepMetrics) float64 { return grpo.Val(m.ZeroVarFrac) })
	}
	if n := len(r.Evals); n > 0 {
		e := r.Evals[n-1]
		s.Final = &e
		s.Checkpoint = fmt.Sprintf("latest: step %d", e.Step)
		if f := r.Status.Final; r.HasStatus && f != nil && f.Which == "best" && f.Value != nil {
			// The last evaluation at the best step (a resumed run may repeat one).
			for i := n - 1; i >= 0; i-- {
				if r.Evals[i].Step == f.Step {
					b := r.Evals[i]
					s.Final = &b
					s.Checkpoint = fmt.Sprintf("best: step %d, %s %.4f", f.Step, f.Metric, *f.Value)
					break
				}
			}
		}
	}
	s.Samples = r.Samples
	s.InProgress, s.Progress = progress(r, s.LastStep)
	return s
}

// progress describes where a run stands from its status.json and the last
// metrics line.
func progress(r Run, lastStep int) (bool, string) {
	var last grpo.Stamp
	for _, m := range r.Steps {
		last = later(last, m.Stamp)
	}
	for _, m := range r.Evals {
		last = later(last, m.Stamp)
	}
	for _, m := range r.SFT {
		last = later(last, m.Stamp)
	}
	when := ""
	if !last.Time.IsZero() {
		when = fmt.Sprintf("; last metrics line %s, after %.1f s of training", last.Time.UTC().Format(time.RFC3339), last.ElapsedSeconds)
	}
	if !r.HasStatus {
		return false, fmt.Sprintf("step %d (no status.json)%s", lastStep, when)
	}
	st := r.Status
	of := fmt.Sprintf("step %d of %d", lastStep, st.Steps)
	switch {
	case st.State == grpo.StateRunning && !r.Alive:
		return false, fmt.Sprintf("stopped without a final status (process %d on %s is gone): %s%s", st.PID, st.Host, of, when)
	case st.State == grpo.StateRunning:
		return true, fmt.Sprintf("training: %s%s", of, when)
	case st.Error != "":
		return false, fmt.Sprintf("%s: %s (%s)%s", st.State, of, st.Error, when)
	}
	return false, fmt.Sprintf("%s: %s%s", st.State, of, when)
}

func later(a, b grpo.Stamp) grpo.Stamp {
	if b.Time.After(a.Time) {
		return b
	}
	return a
}

// alive reports whether the process a "running" status names still exists;
// true when it runs on another host (nothing to check there).
func alive(st grpo.Status) bool {
	host, err := os.Hostname()
	if err != nil || host != st.Host || st.PID <= 0 {
		return true
	}
	// Signal 0 checks existence only; EPERM means it exists under another user.
	err = syscall.Kill(st.PID, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

// meanOf averages the computed values (NaN: not computed); NaN when none is.
func meanOf(ms []grpo.StepMetrics, get func(grpo.StepMetrics) float64) float64 {
	var xs []float64
	for _, m := range ms {
		if v := get(m); !math.IsNaN(v) {
			xs = append(xs, v)
		}
	}
	if len(xs) == 0 {
		return math.NaN()
	}
	return stats.Mean(xs)
}

// Result lists what Generate wrote.
type Result struct {
	HTML     string
	Markdown string
	PNGs     []string
	// InProgress: some run is still training.
	InProgress bool
	// Steps is the last step of each run, in argument order.
	Steps []int
}

// Generate loads the run directories, renders the figures, and writes
// <name>.png for each, report.html (self-contained: images as base64 data
// URIs) and report.md (linking the PNG files) into outDir.
func Generate(ctx context.Context, runDirs []string, outDir string) (Result, error) {
	return GenerateLive(ctx, runDirs, outDir, 0)
}

// GenerateLive is Generate for a report that is rewritten as runs train:
// while a run is in progress, report.html reloads itself every refresh.
func GenerateLive(ctx context.Context, runDirs []string, outDir string, refresh time.Duration) (Result, error) {
	var res Result
	if len(runDirs) == 0 {
		return res, fmt.Errorf("report: no run directories")
	}
	runs := make([]Run, 0, len(runDirs))
	seen := map[string]int{}
	for _, d := range runDirs {
		r, err := LoadRun(ctx, d)
		if err != nil {
			return res, err
		}
		// Two runs with the same base name (a/run, b/run) keep distinct labels.
		if seen[r.Name]++; seen[r.Name] > 1 {
			r.Name = fmt.Sprintf("%s (%d)", r.Name, seen[r.Name])
		}
		if r.Skipped > 0 {
			slog.Debug("metrics lines of other kinds skipped", "run", r.Name, "lines", r.Skipped)
		}
		runs = append(runs, r)
	}
	figs, err := Figures(runs)
	if err != nil {
		return res, err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return res, fmt.Errorf("report: %w", err)
	}
	for _, f := range figs {
		p := filepath.Join(outDir, f.Name+".png")
		if err := atomicfile.Write(p, 0o644, func(w io.Writer) error { _, err := w.Write(f.PNG); return err }); err != nil {
			return res, err
		}
		res.PNGs = append(res.PNGs, p)
	}
	sums := make([]Summary, len(runs))
	for i, r := range runs {
		sums[i] = Summarize(r)
		res.InProgress = res.InProgress || sums[i].InProgress
		res.Steps = append(res.Steps, sums[i].LastStep)
	}
	res.HTML = filepath.Join(outDir, "report.html")
	if err := atomicfile.Write(res.HTML, 0o644, func(w io.Writer) error { return WriteHTML(w, sums, figs, refresh) }); err != nil {
		return res, err
	}
	res.Markdown = filepath.Join(outDir, "report.md")
	if err := atomicfile.Write(res.Markdown, 0o644, func(w io.Writer) error { return WriteMarkdown(w, sums, figs) }); err != nil {
		return res, err
	}
	return res, nil
}

func f3(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.3f", v)
}

func signed(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%+.3f", v)
}

// row is the formatted table row shared by the HTML and Markdown writers.
type row struct {
	Name, Steps, RewardStart, RewardEnd, RewardDelta, KL, ZeroVar  string
	EvalStep, PolReward, RawReward, PolR10, RawR10, PolMRR, RawMRR string
	PolNDCG3, RawNDCG3                                             string
}

func rows(sums []Summary) []row {
	out := make([]row, len(sums))
	for i, s := range sums {
		r := row{Name: s.Name, Steps: fmt.Sprint(s.Steps), EvalStep: "–",
			RewardStart: "–", RewardEnd: "–", RewardDelta: "–", KL: "–", ZeroVar: "–",
			PolReward: "–", RawReward: "–", PolR10: "–", RawR10: "–", PolMRR: "–", RawMRR: "–", PolNDCG3: "–", RawNDCG3: "–"}
		if s.Steps > 0 {
			r.RewardStart, r.RewardEnd = f3(s.RewardStart), f3(s.RewardEnd)
			r.RewardDelta = signed(s.RewardEnd - s.RewardStart)
			r.KL, r.ZeroVar = f3(s.KLEnd), f3(s.ZeroVarEnd)
		}
		if e := s.Final; e != nil {
			r.EvalStep = fmt.Sprintf("%d (%s)", e.Step, s.Checkpoint)
			r.PolReward, r.RawReward = f3(e.Policy.Reward), f3(e.Raw.Reward)
			r.PolR10, r.RawR10 = f3(grpo.Val(e.Policy.Recall10)), f3(grpo.Val(e.Raw.Recall10))
			r.PolMRR, r.RawMRR = f3(grpo.Val(e.Policy.MRR)), f3(grpo.Val(e.Raw.MRR))
			r.PolNDCG3, r.RawNDCG3 = f3(grpo.Val(e.Policy.NDCG3)), f3(grpo.Val(e.Raw.NDCG3))
		}
		out[i] = r
	}
	return out
}

var htmlTmpl = template.Must(template.New("report").Funcs(template.FuncMap{
	"deref": func(s *string) string { return *s },
	"join":  func(ids []string) string { return strings.Join(ids, " · ") },
	// cut keeps long answers from dominating the table (the cell's title
	// and the Parquet file hold the whole text).
	"cut": func(s string) string {
		if r := []rune(s); len(r) > 240 {
			return string(r[:240]) + "…"
		}
		return s
	},
	"opt": func(v *float64) string {
		if v == nil {
			return "–"
		}
		return f3(*v)
	},
}).Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
{{if .Refresh}}<meta http-equiv="refresh" content="{{.Refresh}}">{{end}}
<title>himes run report</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1150px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
figure{margin:2em 0} figcaption{color:#555;font-size:14px;margin-top:.3em}
img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:12px}
table.samples td,table.samples th{text-align:left;vertical-align:top;max-width:22em;font-size:13px}
table.samples td.ids{word-break:break-all;font-family:monospace;font-size:11px;max-width:16em}
.live{background:#eef6ee;border:1px solid #9c9;padding:.4em .8em}
</style></head><body>
<h1>himes run report</h1>
{{range .Sums}}<p class="progress{{if .InProgress}} live{{end}}" data-run="{{.Name}}" data-step="{{.LastStep}}"><b>{{.Name}}</b>: {{.Progress}}{{if .InProgress}} — this page reloads every {{$.Refresh}} s while <code>himes report --watch</code> runs{{end}}</p>
{{end}}
<p>Generated {{.When}} from {{len .Rows}} run(s). {{.TableNote}}</p>
<table>
<tr><th>run</th><th>steps</th><th>reward start</th><th>reward end</th><th>Δ</th><th>KL end</th><th>zero-var end</th><th>eval step (checkpoint)</th><th>policy reward</th><th>raw reward</th><th>policy R@10</th><th>raw R@10</th><th>policy MRR</th><th>raw MRR</th><th>policy NDCG@3</th><th>raw NDCG@3</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.Steps}}</td><td>{{.RewardStart}}</td><td>{{.RewardEnd}}</td><td>{{.RewardDelta}}</td><td>{{.KL}}</td><td>{{.ZeroVar}}</td><td>{{.EvalStep}}</td><td>{{.PolReward}}</td><td>{{.RawReward}}</td><td>{{.PolR10}}</td><td>{{.RawR10}}</td><td>{{.PolMRR}}</td><td>{{.RawMRR}}</td><td>{{.PolNDCG3}}</td><td>{{.RawNDCG3}}</td></tr>
{{end}}</table>
{{if .Diff}}<h2>Config differences</h2>
<p>The config keys whose values differ between the runs (– : not in that run's config.yaml).</p>
<table>
<tr><th>key</th>{{range .Rows}}<th>{{.Name}}</th>{{end}}</tr>
{{range .Diff}}<tr><td>{{.Key}}</td>{{range .Values}}<td>{{.}}</td>{{end}}</tr>
{{end}}</table>
{{end}}{{range .Figures}}<figure id="{{.Name}}"><h2>{{.Title}}</h2>
<img alt="{{.Title}}" src="{{.Src}}">
<figcaption>{{.Caption}}</figcaption></figure>
{{end}}
{{range .Sums}}{{if .Samples}}<section class="samples-section"><h2 id="samples-{{.Name}}">Sample rewrites of {{.Name}} at step {{(index .Samples 0).Step}} ({{(index .Samples 0).Phase}})</h2>
<p>The first held-out turns (<code>grpo.eval_samples</code>), the same at every evaluation; all of them are in <code>samples/*.parquet</code>.</p>
<table class="samples"><tr><th>turn</th><th>question</th><th>policy rewrite</th><th>gold rewrite</th><th>retrieved</th><th>answer</th><th>reference</th><th>reward</th><th>raw reward</th></tr>
{{range .Samples}}<tr><td>{{.ConvID}}#{{.Turn}}</td><td>{{.Question}}</td><td>{{.PolicyRewrite}}</td><td>{{if .GoldRewrite}}{{deref .GoldRewrite}}{{else}}–{{end}}</td><td class="ids">{{join .RetrievedIDs}}</td><td title="{{.Answer}}">{{if .Error}}failed: {{.Error}}{{else}}{{cut .Answer}}{{end}}</td><td title="{{.Reference}}">{{cut .Reference}}</td><td>{{opt .Reward}}</td><td>{{opt .RawReward}}</td></tr>
{{end}}</table></section>
{{end}}{{end}}
{{range .Sums}}{{if .Config}}<details><summary>config.yaml of {{.Name}} ({{.Dir}})</summary><pre>{{.Config}}</pre></details>
{{end}}{{end}}
</body></html>
`))

type htmlFigure struct {
	Name, Title, Caption string
	Src                  template.URL
}

// WriteHTML writes a self-contained report: where each run stands, the
// summary table, every figure embedded as a base64 PNG data URI, and the
// newest sample rewrites. With refresh > 0 and a run in progress, the page
// reloads itself every refresh (a live view while --watch rewrites it).
func WriteHTML(w io.Writer, sums []Summary, figs []Figure, refresh time.Duration) error {
	hf := make([]htmlFigure, len(figs))
	for i, f := range figs {
		// The data URI is built from our own PNG bytes, so marking it safe is sound.
		hf[i] = htmlFigure{Name: f.Name, Title: f.Title, Caption: f.Caption,
			Src: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(f.PNG))}
	}
	live := 0
	for _, s := range sums {
		if s.InProgress && refresh > 0 {
			live = max(1, int(refresh.Round(time.Second).Seconds()))
		}
	}
	diff, err := ConfigDiff(sums)
	if err != nil {
		return err
	}
	return htmlTmpl.Execute(w, map[string]any{
		"Refresh":   live,
		"When":      time.Now().UTC().Format(time.RFC3339),
		"Rows":      rows(sums),
		"Diff":      diff,
		"Figures":   hf,
		"Sums":      sums,
		"TableNote": tableNote,
	})
}

// tableNote says how the summary table's columns are computed (both the
// HTML and the Markdown report carry it).
const tableNote = "Start/end rewards are means over the first/last tenth of the steps; KL and zero-variance share over the last tenth; eval columns are the last evaluation."

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// WriteMarkdown writes the same table and links the PNG files by name.
func WriteMarkdown(w io.Writer, sums []Summary, figs []Figure) error {
	var b strings.Builder
	b.WriteString("# himes run report\n\n")
	for _, s := range sums {
		fmt.Fprintf(&b, "- **%s**: %s\n", mdCell(s.Name), mdCell(s.Progress))
	}
	b.WriteString("\n" + tableNote + "\n\n")
	b.WriteString("| run | steps | reward start | reward end | Δ | KL end | zero-var end | eval step (checkpoint) | policy reward | raw reward | policy R@10 | raw R@10 | policy MRR | raw MRR | policy NDCG@3 | raw NDCG@3 |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows(sums) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			strings.ReplaceAll(r.Name, "|", `\|`), r.Steps, r.RewardStart, r.RewardEnd, r.RewardDelta, r.KL, r.ZeroVar,
			r.EvalStep, r.PolReward, r.RawReward, r.PolR10, r.RawR10, r.PolMRR, r.RawMRR, r.PolNDCG3, r.RawNDCG3)
	}
	diff, err := ConfigDiff(sums)
	if err != nil {
		return err
	}
	if len(diff) > 0 {
		b.WriteString("\n## Config differences\n\n| key |")
		for _, s := range sums {
			b.WriteString(" " + mdCell(s.Name) + " |")
		}
		b.WriteString("\n|---|" + strings.Repeat("---|", len(sums)) + "\n")
		for _, d := range diff {
			b.WriteString("| " + mdCell(d.Key) + " |")
			for _, v := range d.Values {
				b.WriteString(" " + mdCell(v) + " |")
			}
			b.WriteString("\n")
		}
	}
	for _, f := range figs {
		fmt.Fprintf(&b, "\n## %s\n\n![%s](%s.png)\n\n%s\n", f.Title, f.Title, f.Name, f.Caption)
	}
	_, err = io.WriteString(w, b.String())
	return err
}
