package report

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	stdhtml "html"
	"image/png"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/himes-rl/himes/grpo"
)

// writeRun writes a synthetic run dir: reward = slope·step (so start and end
// means are known by hand), an eval every 25 steps, and a config.yaml.
func writeRun(t *testing.T, dir string, steps int, slope float64, extra string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	for s := 1; s <= steps; s++ {
		r := slope * float64(s)
		m := grpo.StepMetrics{Kind: "step", Step: s, RewardMean: fp(r), RewardStd: fp(0.1),
			Terms:       &grpo.Terms{Reward: r, RougeLF1: r / 2, EM: r / 4, Hit: math.Min(1, r), SquadF1: r / 3},
			ZeroVarFrac: fp(0.5 - 0.002*float64(s)), KL: fp(0.001 * float64(s)), Loss: fp(-0.01), GradNorm: fp(1), Entropy: fp(2), RewriteLenMean: 8}
		if err := enc.Encode(m); err != nil {
			t.Fatal(err)
		}
		if s%25 == 0 {
			e := grpo.EvalMetrics{Kind: "eval", Step: s,
				Policy: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.3 + r/2}, Recall10: fp(0.4 + r/4), MRR: fp(0.3), Turns: 40,
					CI: grpo.EvalCI{Reward: &grpo.Interval{Lo: 0.25 + r/2, Hi: 0.35 + r/2}, Recall10: &grpo.Interval{Lo: 0.3 + r/4, Hi: 0.5 + r/4}}},
				Raw: grpo.EvalSystem{Terms: grpo.Terms{Reward: 0.3}, Recall10: fp(0.385), MRR: fp(0.25), Turns: 40,
					CI: grpo.EvalCI{Reward: &grpo.Interval{Lo: 0.27, Hi: 0.33}}}}
			if err := enc.Encode(e); err != nil {
				t.Fatal(err)
			}
		}
	}
	b.WriteString(extra)
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte("reward:\n  alpha: 0.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGenerateFromSyntheticRuns(t *testing.T) {
	root := t.TempDir()
	a, b := filepath.Join(root, "alpha1"), filepath.Join(root, "alpha0")
	writeRun(t, a, 100, 0.004, `{"kind":"sft","step":0,"epoch":1,"loss":2.3}`+"\n"+`{"kind":"sft","step":0,"epoch":2,"loss":1.1}`+"\n"+`{"kind":"note","step":3}`+"\n")
	writeRun(t, b, 60, 0.005, "")
	out := filepath.Join(root, "out")
	res, err := Generate(context.Background(), []string{a, b}, out)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"reward", "terms", "kl", "stability", "zero_variance", "optimization", "timing", "sft", "eval"}
	if len(res.PNGs) != len(want) {
		t.Fatalf("wrote %v, want %d figures", res.PNGs, len(want))
	}
	for i, name := range want {
		if filepath.Base(res.PNGs[i]) != name+".png" {
			t.Fatalf("figure %d is %s, want %s.png", i, res.PNGs[i], name)
		}
		f, err := os.Open(res.PNGs[i])
		if err != nil {
			t.Fatal(err)
		}
		img, err := png.Decode(f)
		f.Close()
		if err != nil {
			t.Fatalf("%s: %v", res.PNGs[i], err)
		}
		if bw := img.Bounds().Dx(); bw < 700 {
			t.Fatalf("%s is %d px wide, too small to read", res.PNGs[i], bw)
		}
	}

	html, err := os.ReadFile(res.HTML)
	if err != nil {
		t.Fatal(err)
	}
	// Self-contained: every figure inline, decodable, and no external src.
	uris := regexp.MustCompile(`src="data:image/png;base64,([A-Za-z0-9+/=&#;]+)"`).FindAllStringSubmatch(string(html), -1)
	if len(uris) != len(want) {
		t.Fatalf("%d embedded images, want %d", len(uris), len(want))
	}
	for _, u := range uris {
		// html/template writes "+" as "&#43;" inside attributes.
		raw, err := base64.StdEncoding.DecodeString(stdhtml.UnescapeString(u[1]))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(raw)); err != nil {
			t.Fatal(err)
		}
	}
	if strings.Contains(string(html), `src="http`) || strings.Contains(string(html), `.png"`) {
		t.Fatal("report.html refers to external files")
	}
	// Run alpha1: first tenth = steps 1..10 → 0.004·5.5 = 0.022; last tenth
	// = steps 91..100 → 0.004·95.5 = 0.382; Δ = 0.360. Final eval at step
	// 100: policy 0.3 + 0.4/2 = 0.5, raw 0.3.
	for _, s := range []string{"<td>alpha1</td><td>100</td><td>0.022</td><td>0.382</td><td>&#43;0.360</td>",
		"<td>100 (latest: step 100)</td><td>0.500</td><td>0.300</td>", "<td>alpha0</td><td>60</td>"} {
		if !strings.Contains(string(html), s) {
			t.Errorf("report.html lacks %q", s)
		}
	}
	if !strings.Contains(string(html), "alpha: 0.5") {
		t.Error("config.yaml not included")
	}
	md, err := os.ReadFile(res.Markdown)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(md), "![Reward](reward.png)") {
		t.Error("report.md does not link the reward plot")
	}
}

func TestSummarizeHandComputed(t *testing.T) {
	r := Run{Name: "x"}
	for s := 1; s <= 20; s++ {
		r.Steps = append(r.Steps, grpo.StepMetrics{Step: s, RewardMean: fp(float64(s)), KL: fp(1)})
	}
	s := Summarize(r)
	// Tenth of 20 = 2 steps: start (1+2)/2, end (19+20)/2.
	if s.RewardStart != 1.5 || s.RewardEnd != 19.5 || s.LastStep != 20 || s.Final != nil {
		t.Fatalf("got %+v", s)
	}
}

func TestReadMetricsKinds(t *testing.T) {
	in := `{"kind":"sft","step":0,"epoch":1,"loss":0.5}` + "\n" + `{"kind":"step","step":1,"reward_mean":0.25}` + "\n" +
		`{"kind":"eval","step":1,"policy":{"reward":0.5},"raw":{"reward":0.25}}` + "\n" + `{"kind":"future","x":1}` + "\n"
	m, err := ReadMetrics(context.Background(), strings.NewReader(in), "m.jsonl")
	if err != nil {
		t.Fatal(err)
	}
	if len(m.SFT) != 1 || m.SFT[0].Loss != 0.5 || len(m.Steps) != 1 || grpo.Val(m.Steps[0].RewardMean) != 0.25 ||
		len(m.Evals) != 1 || m.Evals[0].Policy.Reward != 0.5 || m.Skipped != 1 {
		t.Fatalf("got %+v", m)
	}
}

func TestReadMetricsErrorsNameLineAndField(t *testing.T) {
	in := `{"kind":"step","step":1,"reward_mean":0.1}` + "\n\n" + `{"kind":"step","step":2,"reward_mean":"high"}` + "\n"
	_, err := ReadMetrics(context.Background(), strings.NewReader(in), "run/metrics.jsonl")
	if err == nil || !strings.Contains(err.Error(), "run/metrics.jsonl:3") || !strings.Contains(err.Error(), "reward_mean") {
		t.Fatalf("got %v, want an error naming run/metrics.jsonl:3 and reward_mean", err)
	}
	_, err = ReadMetrics(context.Background(), strings.NewReader(`{"step":1}`+"\n"), "m.jsonl")
	if err == nil || !strings.Contains(err.Error(), "m.jsonl:1: field kind") {
		t.Fatalf("got %v, want a missing-kind error", err)
	}
	_, err = ReadMetrics(context.Background(), strings.NewReader("{not json\n"), "m.jsonl")
	if err == nil || !strings.Contains(err.Error(), "m.jsonl:1") {
		t.Fatalf("got %v, want a syntax error at line 1", err)
	}
}

func TestLoadRunMissingMetrics(t *testing.T) {
	_, err := LoadRun(context.Background(), t.TempDir())
	if err == nil || !strings.Contains(err.Error(), MetricsFile) {
		t.Fatalf("got %v, want an error naming %s", err, MetricsFile)
	}
}

func fp(v float64) *float64 { return &v }

// A run written before tokens were redacted holds the literal bearer token in
// config.yaml; the report must not copy it into report.html.
func TestLoadRunRedactsLiteralToken(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, MetricsFile), []byte(`{"kind":"step","step":1}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := "run:\n  name: x\ntrainer:\n  endpoint: http://h:1\n  token: \"s3cr3t\"\n  timeout_seconds: 600\nother:\n  token: $ENV_REF\n  token_kind: a\n"
	if err := os.WriteFile(filepath.Join(dir, ConfigFile), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	run, err := LoadRun(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	want := "run:\n  name: x\ntrainer:\n  endpoint: http://h:1\n  token: <redacted>\n  timeout_seconds: 600\nother:\n  token: $ENV_REF\n  token_kind: a\n"
	if run.Config != want {
		t.Errorf("config shown as\n%s\nwant\n%s", run.Config, want)
	}
}
