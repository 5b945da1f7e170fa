package report

import (
	"context"
	"encoding/base64"
	"fmt"
	"html/template"
	"io"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/himes-rl/himes/grpo"
	"github.com/himes-rl/himes/internal/atomicfile"
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
	Final       *grpo.EvalMetrics // the last eval line, nil when none
	Config      string
}

// Summarize reduces a run to its table row. Start and end rewards average a
// tenth of the steps (at least one) so one noisy step does not decide them.
func Summarize(r Run) Summary {
	s := Summary{Name: r.Name, Dir: r.Dir, Steps: len(r.Steps), Evals: len(r.Evals), Config: r.Config}
	if n := len(r.Steps); n > 0 {
		k := max(1, n/10)
		s.LastStep = r.Steps[n-1].Step
		s.RewardStart = meanOf(r.Steps[:k], func(m grpo.StepMetrics) float64 { return m.RewardMean })
		tail := r.Steps[n-k:]
		s.RewardEnd = meanOf(tail, func(m grpo.StepMetrics) float64 { return m.RewardMean })
		s.KLEnd = meanOf(tail, func(m grpo.StepMetrics) float64 { return m.KL })
		s.ZeroVarEnd = meanOf(tail, func(m grpo.StepMetrics) float64 { return m.ZeroVarFrac })
	}
	if n := len(r.Evals); n > 0 {
		e := r.Evals[n-1]
		s.Final = &e
	}
	return s
}

func meanOf(ms []grpo.StepMetrics, get func(grpo.StepMetrics) float64) float64 {
	var sum float64
	for _, m := range ms {
		sum += get(m)
	}
	return sum / float64(len(ms))
}

// Result lists what Generate wrote.
type Result struct {
	HTML     string
	Markdown string
	PNGs     []string
}

// Generate loads the run directories, renders the figures, and writes
// <name>.png for each, report.html (self-contained: images as base64 data
// URIs) and report.md (linking the PNG files) into outDir.
func Generate(ctx context.Context, runDirs []string, outDir string) (Result, error) {
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
	}
	res.HTML = filepath.Join(outDir, "report.html")
	if err := atomicfile.Write(res.HTML, 0o644, func(w io.Writer) error { return WriteHTML(w, sums, figs) }); err != nil {
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
}

func rows(sums []Summary) []row {
	out := make([]row, len(sums))
	for i, s := range sums {
		r := row{Name: s.Name, Steps: fmt.Sprint(s.Steps), EvalStep: "–",
			RewardStart: "–", RewardEnd: "–", RewardDelta: "–", KL: "–", ZeroVar: "–",
			PolReward: "–", RawReward: "–", PolR10: "–", RawR10: "–", PolMRR: "–", RawMRR: "–"}
		if s.Steps > 0 {
			r.RewardStart, r.RewardEnd = f3(s.RewardStart), f3(s.RewardEnd)
			r.RewardDelta = signed(s.RewardEnd - s.RewardStart)
			r.KL, r.ZeroVar = f3(s.KLEnd), f3(s.ZeroVarEnd)
		}
		if e := s.Final; e != nil {
			r.EvalStep = fmt.Sprint(e.Step)
			r.PolReward, r.RawReward = f3(e.Policy.Reward), f3(e.Raw.Reward)
			r.PolR10, r.RawR10 = f3(e.Policy.Recall10), f3(e.Raw.Recall10)
			r.PolMRR, r.RawMRR = f3(e.Policy.MRR), f3(e.Raw.MRR)
		}
		out[i] = r
	}
	return out
}

var htmlTmpl = template.Must(template.New("report").Parse(`<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>himes run report</title>
<style>
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;margin:2em auto;max-width:1150px;color:#222;padding:0 1em}
table{border-collapse:collapse;margin:1em 0;font-size:14px}
th,td{border:1px solid #ccc;padding:4px 8px;text-align:right}
th{background:#f3f3f3} td:first-child,th:first-child{text-align:left}
figure{margin:2em 0} figcaption{color:#555;font-size:14px;margin-top:.3em}
img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:.8em;overflow:auto;font-size:12px}
</style></head><body>
<h1>himes run report</h1>
<p>Generated {{.When}} from {{len .Rows}} run(s). Start/end rewards are means over the first/last tenth of the steps; KL and zero-variance share over the last tenth; eval columns are the last evaluation.</p>
<table>
<tr><th>run</th><th>steps</th><th>reward start</th><th>reward end</th><th>Δ</th><th>KL end</th><th>zero-var end</th><th>eval step</th><th>policy reward</th><th>raw reward</th><th>policy R@10</th><th>raw R@10</th><th>policy MRR</th><th>raw MRR</th></tr>
{{range .Rows}}<tr><td>{{.Name}}</td><td>{{.Steps}}</td><td>{{.RewardStart}}</td><td>{{.RewardEnd}}</td><td>{{.RewardDelta}}</td><td>{{.KL}}</td><td>{{.ZeroVar}}</td><td>{{.EvalStep}}</td><td>{{.PolReward}}</td><td>{{.RawReward}}</td><td>{{.PolR10}}</td><td>{{.RawR10}}</td><td>{{.PolMRR}}</td><td>{{.RawMRR}}</td></tr>
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
{{range .Sums}}{{if .Config}}<details><summary>config.yaml of {{.Name}} ({{.Dir}})</summary><pre>{{.Config}}</pre></details>
{{end}}{{end}}
</body></html>
`))

type htmlFigure struct {
	Name, Title, Caption string
	Src                  template.URL
}

// WriteHTML writes a self-contained report: the summary table and every
// figure embedded as a base64 PNG data URI.
func WriteHTML(w io.Writer, sums []Summary, figs []Figure) error {
	hf := make([]htmlFigure, len(figs))
	for i, f := range figs {
		// The data URI is built from our own PNG bytes, so marking it safe is sound.
		hf[i] = htmlFigure{Name: f.Name, Title: f.Title, Caption: f.Caption,
			Src: template.URL("data:image/png;base64," + base64.StdEncoding.EncodeToString(f.PNG))}
	}
	diff, err := ConfigDiff(sums)
	if err != nil {
		return err
	}
	return htmlTmpl.Execute(w, map[string]any{
		"When":    time.Now().UTC().Format(time.RFC3339),
		"Rows":    rows(sums),
		"Diff":    diff,
		"Figures": hf,
		"Sums":    sums,
	})
}

func mdCell(s string) string {
	return strings.NewReplacer("|", `\|`, "\n", " ").Replace(s)
}

// WriteMarkdown writes the same table and links the PNG files by name.
func WriteMarkdown(w io.Writer, sums []Summary, figs []Figure) error {
	var b strings.Builder
	b.WriteString("# himes run report\n\n")
	b.WriteString("| run | steps | reward start | reward end | Δ | KL end | zero-var end | eval step | policy reward | raw reward | policy R@10 | raw R@10 | policy MRR | raw MRR |\n")
	b.WriteString("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rows(sums) {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s |\n",
			strings.ReplaceAll(r.Name, "|", `\|`), r.Steps, r.RewardStart, r.RewardEnd, r.RewardDelta, r.KL, r.ZeroVar,
			r.EvalStep, r.PolReward, r.RawReward, r.PolR10, r.RawR10, r.PolMRR, r.RawMRR)
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
