package grpo

import (
	"bufio"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/internal/rundir"
	"github.com/himes-rl/himes/rlcore"
)

// fakeClock advances by one second at every reading, so stamps are exact.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(time.Second)
	return c.t
}

// recTracker records what the loop sends a tracker.
type recTracker struct {
	begins  []int
	scalars map[int][]Scalar // by step, appended
	texts   []string
	flushes int
	closed  bool
}

func (r *recTracker) Begin(first int) error { r.begins = append(r.begins, first); return nil }
func (r *recTracker) Scalars(step int, _ time.Time, v []Scalar) error {
	if r.scalars == nil {
		r.scalars = map[int][]Scalar{}
	}
	r.scalars[step] = append(r.scalars[step], v...)
	return nil
}
func (r *recTracker) Text(step int, _ time.Time, tag, md string) error {
	r.texts = append(r.texts, tag+"@"+string(rune('0'+step))+"\n"+md)
	return nil
}
func (r *recTracker) Flush() error { r.flushes++; return nil }
func (r *recTracker) Close() error { r.closed = true; return nil }

func metricsFileLines(t *testing.T, path string) []map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []map[string]any
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// A term the trainer does not compute is absent from metrics.jsonl, never a
// 0: KL with kl_coef 0, entropy from an endpoint without the capability, and
// Recall@10/MRR when there is no ranker. Every line carries its time and the
// training time before it.
func TestMetricsStampsAndNotComputedTerms(t *testing.T) {
	for _, kl := range []float64{0, 0.1} {
		run, err := rundir.Open(t.TempDir(), "r", rundir.New)
		if err != nil {
			t.Fatal(err)
		}
		cfg := testConfig()
		cfg.Loss.KLCoef = new(kl)
		tr := newTestLoop(t, cfg, newFakePolicy(" paris", "", "", ""), run)
		start := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
		clock := &fakeClock{t: start}
		tr.deps.Now = clock.Now
		if err := tr.Run(context.Background(), false); err != nil {
			t.Fatal(err)
		}
		lines := metricsFileLines(t, run.File("metrics.jsonl"))
		if len(lines) != 4 { // eval@0, step 1, step 2, eval@2
			t.Fatalf("%d lines, want 4", len(lines))
		}
		// The clock's first reading (start+1s) is the session start.
		prev := -1.0
		for i, m := range lines {
			ts, err := time.Parse(time.RFC3339, m["time"].(string))
			if err != nil {
				t.Fatalf("line %d: time %v: %v", i+1, m["time"], err)
			}
			el := m["elapsed_s"].(float64)
			if want := ts.Sub(start.Add(time.Second)).Seconds(); el != want || el <= prev {
				t.Fatalf("line %d: elapsed_s %v, want %v (time %v) and above %v", i+1, el, want, ts, prev)
			}
			prev = el
		}
		for _, m := range lines[1:3] {
			if _, ok := m["entropy"]; ok {
				t.Errorf("kl_coef %v: entropy logged though the endpoint does not compute it: %v", kl, m["entropy"])
			}
			_, hasKL := m["kl"]
			if hasKL != (kl > 0) {
				t.Errorf("kl_coef %v: kl present = %v", kl, hasKL)
			}
			for _, k := range []string{"loss", "grad_norm", "reward_mean", "terms"} {
				if _, ok := m[k]; !ok {
					t.Errorf("kl_coef %v: %s missing", kl, k)
				}
			}
		}
		pol := lines[0]["policy"].(map[string]any)
		if _, ok := pol["recall_10"]; ok {
			t.Errorf("recall_10 logged without a ranker: %v", pol["recall_10"])
		}
		ci := pol["ci"].(map[string]any)
		if _, ok := ci["reward"]; !ok {
			t.Error("no reward interval")
		}
	}
}

func TestStepMetricsWithoutUpdate(t *testing.T) {
	// Every group dropped: no update was sent, so the trainer's numbers and
	// the advantages are absent, while the rewards are still reported.
	b := &stepBatch{}
	m := stepMetrics(1, 0, b, rlcore.Advantages{}, updateReport{}, 0)
	if m.Loss != nil || m.KL != nil || m.GradNorm != nil || m.Entropy != nil || m.AdvantageMean != nil ||
		m.RewardMean != nil || m.Terms != nil || m.ZeroVarFrac != nil {
		t.Fatalf("not-computed metrics set: %+v", m)
	}
	raw, _ := json.Marshal(m)
	for _, k := range []string{`"loss"`, `"kl"`, `"reward_mean"`, `"terms"`, `"zero_var_frac"`} {
		if strings.Contains(string(raw), k) {
			t.Errorf("%s in %s", k, raw)
		}
	}
}

func TestFlattenUsesMetricsNames(t *testing.T) {
	m := StepMetrics{Kind: "step", Step: 7, RewardMean: ptr(0.5), Terms: &Terms{EM: 0.25}, GradNorm: ptr(2), StepSeconds: 1.5,
		Stamp: Stamp{Time: time.Unix(5, 0), ElapsedSeconds: 3}}
	got, err := Flatten(&m)
	if err != nil {
		t.Fatal(err)
	}
	vals := map[string]float64{}
	for _, s := range got {
		vals[s.Name] = s.Value
	}
	for name, want := range map[string]float64{"step/reward_mean": 0.5, "step/terms/em": 0.25, "step/grad_norm": 2,
		"step/t_step_s": 1.5, "step/elapsed_s": 3, "step/rollouts": 0} {
		if v, ok := vals[name]; !ok || v != want {
			t.Errorf("%s = %v (present %v), want %v", name, v, ok, want)
		}
	}
	for _, name := range []string{"step/kl", "step/entropy", "step/step", "step/kind", "step/time"} {
		if _, ok := vals[name]; ok {
			t.Errorf("%s present", name)
		}
	}
	e := EvalMetrics{Kind: "eval", Step: 2, Phase: "grpo", Policy: EvalSystem{Recall10: ptr(0.75), CI: EvalCI{Recall10: &Interval{0.5, 1}}}}
	got, _ = Flatten(&e)
	vals = map[string]float64{}
	for _, s := range got {
		vals[s.Name] = s.Value
	}
	if vals["eval/policy/recall_10"] != 0.75 || vals["eval/policy/ci/recall_10/lo"] != 0.5 || vals["eval/policy/ci/recall_10/hi"] != 1 {
		t.Errorf("eval names: %v", vals)
	}
}

func TestSamplesRoundTripAndTracker(t *testing.T) {
	run, err := rundir.Open(t.TempDir(), "r", rundir.New)
	if err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.EvalSamples = 1 // of the 2 eval turns
	tr := newTestLoop(t, cfg, newFakePolicy(" paris", "", "", ""), run)
	rec := &recTracker{}
	tr.deps.Tracker = rec
	if err := tr.Run(context.Background(), false); err != nil {
		t.Fatal(err)
	}
	// Greedy eval: the rewrite is the question; the echo retriever returns it
	// as chunk "c" and the responder answers its last word.
	for _, name := range []string{"step-000000-init.parquet", "step-000002-grpo.parquet"} {
		rows, err := ReadSamples(filepath.Join(run.Path, "samples", name))
		if err != nil {
			t.Fatal(err)
		}
		step := 0
		if strings.Contains(name, "000002") {
			step = 2
		}
		// Rouge-L F1 of "it" against "paris france" is 0; no EM; with the
		// default hit mode (answer in retrieved content) hit is 1: with the
		// default α = β = 1 the reward is 0 + 0 + 1 = 1.
		want := []SampleRow{{Step: step, Phase: map[int]string{0: "init", 2: "grpo"}[step], ConvID: "c0", Turn: 2,
			Question: "where is it", PolicyRewrite: "where is it", RetrievedIDs: []string{"c"}, Answer: "it",
			Reference: "paris france", Reward: ptr(1), RougeLF1: ptr(0), EM: ptr(0), Hit: ptr(1), RawReward: ptr(1)}}
		if !reflect.DeepEqual(rows, want) {
			t.Fatalf("%s:\n got %+v\nwant %+v", name, rows, want)
		}
	}
	// One flush per checkpoint: step 0 (before its evaluation), step 0 again
	// as the best (grpo.best_metric defaults to eval.policy.reward), step 2.
	if !reflect.DeepEqual(rec.begins, []int{0}) || !rec.closed || rec.flushes != 4 || len(rec.texts) != 2 {
		t.Fatalf("tracker: begins %v closed %v flushes %d texts %d", rec.begins, rec.closed, rec.flushes, len(rec.texts))
	}
	if !strings.Contains(rec.texts[1], "| c0#2 | where is it | where is it | – | c | it | paris france |") {
		t.Errorf("text summary:\n%s", rec.texts[1])
	}
	names := map[string]bool{}
	for _, s := range rec.scalars[1] {
		names[s.Name] = true
	}
	if !names["step/reward_mean"] || !names["step/t_step_s"] || names["step/kl"] {
		t.Errorf("step 1 scalars: %v", names)
	}
}

func TestWriteSamplesNullsAndLists(t *testing.T) {
	gold := "the gold | rewrite"
	in := []SampleRow{
		{Step: 3, Phase: "grpo", ConvID: "a", Turn: 1, Question: "q?", PolicyRewrite: "p", GoldRewrite: &gold,
			RetrievedIDs: []string{"x", "y"}, GoldPassages: []string{"y"}, Answer: "ans", Reference: "ref",
			Reward: ptr(1.5), RougeLF1: ptr(0.5), EM: ptr(0), Hit: ptr(1), RawReward: ptr(0.25)},
		{Step: 3, Phase: "grpo", ConvID: "b", Turn: 4, Question: "q2", Error: "responder: timeout"},
	}
	path := filepath.Join(t.TempDir(), "s.parquet")
	if err := WriteSamples(path, in); err != nil {
		t.Fatal(err)
	}
	got, err := ReadSamples(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, in) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, in)
	}
	md := SamplesMarkdown(in)
	if !strings.Contains(md, `the gold \| rewrite`) || !strings.Contains(md, "failed: responder: timeout") {
		t.Fatalf("markdown:\n%s", md)
	}
}
