package ablate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/evaluate"
	"github.com/himes-rl/himes/internal/stats"
)

func writeCollection(t *testing.T, dir, name string, convs ...string) string {
	t.Helper()
	var b strings.Builder
	for _, c := range convs {
		b.WriteString(`{"conv_id": "` + c + `", "turn": 1, "history": [], "question": "q of ` + c + `", "rewrite": "q of ` + c + `", "answer": "a", "passages": []}` + "\n")
	}
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestPlanTransferLeavesEachCollectionOutOnce(t *testing.T) {
	base := sweepBase(t)
	dir := t.TempDir()
	a := writeCollection(t, dir, "a.jsonl", "a1")
	b := writeCollection(t, dir, "b.jsonl", "b1")
	c := writeCollection(t, dir, "c.jsonl.gz", "c1")
	base.GRPO.SFT.Epochs = 1
	vs := TransferVariants(base)
	if len(vs) != 2 || vs[0].Name != "sft" || !slices.Equal(vs[0].Overrides, []string{"grpo.steps=0"}) || vs[1].Name != "sft+grpo" {
		t.Fatalf("variants with SFT: %+v", vs)
	}
	out := filepath.Join(dir, "out")
	folds, err := PlanTransfer(base, []string{a, b, c}, vs, out)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"a": {b, c}, "b": {a, c}, "c": {a, b}}
	if len(folds) != 3 {
		t.Fatalf("%d folds", len(folds))
	}
	for _, f := range folds {
		if !slices.Equal(f.Train, want[f.Name]) || slices.Contains(f.Train, f.HeldOut) {
			t.Errorf("fold %s trains on %v, want %v", f.Name, f.Train, want[f.Name])
		}
		if len(f.Runs) != 2 || f.Runs[1].RunDir != filepath.Join(out, f.Name, "sft_grpo") {
			t.Errorf("fold %s runs %+v", f.Name, f.Runs)
		}
		o := f.Overrides(f.Runs[0])
		for _, w := range []string{"data.train=" + f.TrainAt, "data.eval=" + f.HeldOut, "run.name=sft", "run.output_dir=" + filepath.Join(out, f.Name), "grpo.steps=0"} {
			if !slices.Contains(o, w) {
				t.Errorf("fold %s sft overrides %v lack %q", f.Name, o, w)
			}
		}
	}
	sftOnly := base
	sftOnly.GRPO.Steps = 0
	if vs := TransferVariants(sftOnly); len(vs) != 1 || vs[0].Name != "sft" {
		t.Errorf("variants with grpo.steps 0: %+v, want sft alone", vs)
	}
	base.GRPO.SFT.Epochs = 0
	if vs := TransferVariants(base); len(vs) != 1 || vs[0].Name != "grpo" || vs[0].Overrides != nil {
		t.Errorf("variants without SFT: %+v", vs)
	}
	if _, err := PlanTransfer(base, []string{a}, vs, out); err == nil {
		t.Error("one collection: want an error")
	}
	if _, err := PlanTransfer(base, []string{a, filepath.Join(t.TempDir(), "a.jsonl")}, vs, out); err == nil || !strings.Contains(err.Error(), `share the name "a"`) {
		t.Errorf("two collections named a: err %v", err)
	}
}

func TestWriteFoldTrainConcatenatesAndRefusesSharedConversations(t *testing.T) {
	dir := t.TempDir()
	a := writeCollection(t, dir, "a.jsonl", "a1", "a2")
	b := writeCollection(t, dir, "b.jsonl", "b1")
	f := TransferFold{Name: "c", Train: []string{a, b}, TrainAt: filepath.Join(dir, "fold", "train.jsonl")}
	n, err := WriteFoldTrain(context.Background(), f, datasets.LoadOptions{})
	if err != nil || n != 3 {
		t.Fatalf("n %d, err %v", n, err)
	}
	turns, _, err := datasets.LoadContext(t.Context(), f.TrainAt, datasets.LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids, colls []string
	for _, t := range turns {
		ids = append(ids, t.ConvID)
		colls = append(colls, fmt.Sprint(t.Meta[CollectionKey]))
	}
	if !slices.Equal(ids, []string{"a1", "a2", "b1"}) {
		t.Errorf("written conversations %v", ids)
	}
	// Each turn names its collection, which the runs' dev split is stratified by.
	if !slices.Equal(colls, []string{"a", "a", "b"}) {
		t.Errorf("meta.collection %v", colls)
	}
	if o := f.Overrides(TransferRun{RunName: "r", RunDir: filepath.Join(dir, "r")}); !slices.Contains(o, "data.dev_group=meta.transfer_collection") {
		t.Errorf("the runs' overrides lack the dev group: %v", o)
	}
	clash := writeCollection(t, dir, "clash.jsonl", "a2")
	f.Train = []string{a, clash}
	if _, err := WriteFoldTrain(context.Background(), f, datasets.LoadOptions{}); err == nil || !strings.Contains(err.Error(), `conversation "a2" is in both`) {
		t.Errorf("shared conversation id: err %v", err)
	}
}

func summaryWith(t *testing.T, dir string, r10 map[string]float64) {
	t.Helper()
	rep := evaluate.Report{Turns: 10, Conversations: 3, Stats: stats.DefaultConfig()}
	for _, name := range []string{"raw", "concat", "gold", "policy"} {
		s := evaluate.SystemReport{Name: name, Rewriter: name, Metrics: map[string]stats.Estimate{
			evaluate.MRecall10: {Mean: r10[name], Lo: r10[name] - 0.1, Hi: r10[name] + 0.1, Turns: 10, Clusters: 3},
			evaluate.MMRR:      {Mean: r10[name] / 2},
		}}
		if name != "raw" {
			s.VsBaseline = map[string]stats.Comparison{evaluate.MRecall10: {Diff: r10[name] - r10["raw"], P: 0.04}}
		}
		rep.Systems = append(rep.Systems, s)
		// A memory-on row must not be mistaken for the memory-off one.
		rep.Systems = append(rep.Systems, evaluate.SystemReport{Name: name + "+memory", Rewriter: name, Memory: true,
			Metrics: map[string]stats.Estimate{evaluate.MRecall10: {Mean: 0.99}}})
	}
	raw, _ := json.Marshal(rep)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "summary.json"), raw, 0o644); err != nil {
		t.Fatal(err)
	}
}

// turnsWith writes an evaluation's turns.parquet with the policy's per-turn
// Recall@10 on 4 turns of 2 conversations (NaN: the turn has no judged
// passage), and a raw row that must not be mistaken for the policy's.
func turnsWith(t *testing.T, dir string, r10 []float64) {
	t.Helper()
	var pol, raw []evaluate.TurnResult
	for i, x := range r10 {
		tr := evaluate.TurnResult{System: "policy", ConvID: fmt.Sprintf("c%d", i/2), Turn: i%2 + 1, HasGold: !math.IsNaN(x), Recall10: x, NDCG3: x / 2}
		pol = append(pol, tr)
		tr.System, tr.Recall10 = "raw", 0.99
		raw = append(raw, tr)
	}
	if err := evaluate.WriteTurnsParquet(filepath.Join(dir, "turns.parquet"), [][]evaluate.TurnResult{raw, pol}); err != nil {
		t.Fatal(err)
	}
}

func TestGatherTransferGapClosedHandComputed(t *testing.T) {
	dir := t.TempDir()
	sft := TransferRun{Variant: TransferVariant{Name: "sft"}, EvalDir: filepath.Join(dir, "sft", "eval")}
	full := TransferRun{Variant: TransferVariant{Name: "sft+grpo"}, EvalDir: filepath.Join(dir, "full", "eval")}
	failed := TransferRun{Variant: TransferVariant{Name: "broken"}, EvalDir: filepath.Join(dir, "broken", "eval")}
	// raw 0.30, gold 0.70: a gap of 0.40. SFT reaches 0.40 (25% closed),
	// SFT+GRPO 0.60 (75%); concat below raw stays a fixed row without a gap.
	summaryWith(t, sft.EvalDir, map[string]float64{"raw": 0.3, "concat": 0.2, "gold": 0.7, "policy": 0.4})
	summaryWith(t, full.EvalDir, map[string]float64{"raw": 0.3, "concat": 0.2, "gold": 0.7, "policy": 0.6})
	// Paired by turn, SFT+GRPO − SFT: turn 3 has no judged passage in
	// either, so Δ = ((1−0) + (0.5−0.5) + (0.2−0.1))/3 = 1.1/3 on Recall@10,
	// half of it on NDCG@3 (written as Recall@10 / 2).
	turnsWith(t, sft.EvalDir, []float64{0, 0.5, math.NaN(), 0.1})
	turnsWith(t, full.EvalDir, []float64{1, 0.5, math.NaN(), 0.2})
	folds := []TransferFold{{Name: "x", Train: []string{"/d/a.jsonl", "/d/b.jsonl"}, Runs: []TransferRun{sft, full, failed}}}
	rows := GatherTransfer(folds, [][]error{{nil, nil, errors.New("boom")}})
	r := rows[0]
	var names []string
	for _, s := range r.Systems {
		names = append(names, s.Name)
	}
	if !slices.Equal(names, []string{"raw", "concat", "gold", "sft", "sft+grpo"}) {
		t.Fatalf("systems %v", names)
	}
	if !slices.Equal(r.TrainedOn, []string{"a", "b"}) || r.Turns != 10 || len(r.Errors) != 1 || !strings.Contains(r.Errors[0], "broken: boom") {
		t.Errorf("row %+v", r)
	}
	for name, want := range map[string]float64{"sft": 0.25, "sft+grpo": 0.75} {
		s := r.system(name)
		if s.GapClosed == nil || math.Abs(*s.GapClosed-want) > 1e-12 {
			t.Errorf("%s gap closed %v, want %v", name, s.GapClosed, want)
		}
		if c := s.Metrics[evaluate.MRecall10]; c.VsRaw == nil || math.Abs(c.VsRaw.Diff-(c.Estimate.Mean-0.3)) > 1e-12 {
			t.Errorf("%s: paired comparison %+v", name, c.VsRaw)
		}
	}
	for _, fixed := range []string{"raw", "concat", "gold"} {
		if s := r.system(fixed); s.GapClosed != nil || s.Metrics[evaluate.MRecall10].Estimate.Mean == 0.99 {
			t.Errorf("%s: %+v", fixed, s)
		}
	}
	if r.system("raw").Metrics[evaluate.MRecall10].VsRaw != nil {
		t.Error("raw compared with itself")
	}
	if len(r.VsSFT) != 1 || r.VsSFT[0].Variant != "sft+grpo" || r.VsSFT[0].Baseline != "sft" {
		t.Fatalf("vs sft %+v", r.VsSFT)
	}
	for m, want := range map[string]float64{evaluate.MRecall10: 1.1 / 3, evaluate.MNDCG3: 1.1 / 6} {
		c := r.VsSFT[0].Metrics[m]
		if math.Abs(c.Diff-want) > 1e-12 || c.Turns != 3 || c.Clusters != 2 || c.Lo > c.Diff || c.Hi < c.Diff {
			t.Errorf("%s: paired %+v, want Δ %v over 3 turns of 2 conversations", m, c, want)
		}
	}
	var md strings.Builder
	if err := WriteTransferMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"| x | 10 | 0.300 [0.200, 0.400] |", "| x | 25% | 75% |", "fold x failed: broken: boom", "| x | sft+grpo − sft | +0.367 ["} {
		if !strings.Contains(md.String(), w) {
			t.Errorf("markdown lacks %q:\n%s", w, md.String())
		}
	}
	png, err := TransferPNG(rows)
	if err != nil || len(png) < 1000 || string(png[1:4]) != "PNG" {
		t.Errorf("png: %d bytes, err %v", len(png), err)
	}
}

func TestSeededVariantsRepeatEachRecipePerSeed(t *testing.T) {
	base := []TransferVariant{{Name: "sft", Overrides: []string{"grpo.steps=0"}}, {Name: "sft+grpo"}}
	vs, err := SeededVariants(base, []int{1, 7})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vs {
		got = append(got, fmt.Sprintf("%s|%s|%d|%s", v.Name, v.Base, v.Seed, strings.Join(v.Overrides, ",")))
	}
	want := []string{"sft seed 1|sft|1|grpo.steps=0,run.seed=1", "sft seed 7|sft|7|grpo.steps=0,run.seed=7",
		"sft+grpo seed 1|sft+grpo|1|run.seed=1", "sft+grpo seed 7|sft+grpo|7|run.seed=7"}
	if !slices.Equal(got, want) {
		t.Errorf("variants\n%v\nwant\n%v", got, want)
	}
	if base[0].Overrides[len(base[0].Overrides)-1] != "grpo.steps=0" || len(base[0].Overrides) != 1 {
		t.Errorf("the base recipe was changed: %v", base[0].Overrides)
	}
	if _, err := SeededVariants(base, []int{3, 3}); err == nil || !strings.Contains(err.Error(), "seed 3 is given twice") {
		t.Errorf("repeated seed: %v", err)
	}
	if same, _ := SeededVariants(base, nil); !slices.EqualFunc(same, base, func(a, b TransferVariant) bool { return a.Name == b.Name }) {
		t.Errorf("no seeds changed the variants: %v", same)
	}
}

func TestTransferOverSeedsHandComputed(t *testing.T) {
	dir := t.TempDir()
	vs, err := SeededVariants([]TransferVariant{{Name: "sft"}}, []int{1, 2, 3})
	if err != nil {
		t.Fatal(err)
	}
	// raw 0.30, gold 0.70 (gap 0.40); the seeds reach 0.40, 0.50 and 0.60:
	// 25%, 50% and 75% of the gap, mean 50%, sd 25%, and with t(0.975, 2) =
	// 4.302653 the interval 50% ± 4.302653·25%/√3 = [−12.1%, 112.1%].
	var runs []TransferRun
	for k, v := range vs {
		r := TransferRun{Variant: v, EvalDir: filepath.Join(dir, fmt.Sprint(k), "eval")}
		summaryWith(t, r.EvalDir, map[string]float64{"raw": 0.3, "concat": 0.2, "gold": 0.7, "policy": 0.4 + 0.1*float64(k)})
		runs = append(runs, r)
	}
	// A fourth seed that failed counts as failed, not as a zero.
	broken := TransferRun{Variant: TransferVariant{Name: "sft seed 4", Base: "sft", Seed: 4}, EvalDir: filepath.Join(dir, "b", "eval")}
	runs = append(runs, broken)
	rows := GatherTransfer([]TransferFold{{Name: "x", Train: []string{"/d/a.jsonl"}, Runs: runs}}, [][]error{{nil, nil, nil, errors.New("boom")}})
	if len(rows[0].OverSeeds) != 1 {
		t.Fatalf("over seeds %+v", rows[0].OverSeeds)
	}
	s := rows[0].OverSeeds[0]
	half := 4.302653 * 0.25 / math.Sqrt(3)
	for _, c := range []struct {
		name      string
		got, want *float64
	}{
		{"mean", s.GapClosed.Mean, ptr(0.5)}, {"sd", s.GapClosed.SD, ptr(0.25)},
		{"lo", s.GapClosed.Lo, ptr(0.5 - half)}, {"hi", s.GapClosed.Hi, ptr(0.5 + half)},
		{"min", s.GapMin, ptr(0.25)}, {"max", s.GapMax, ptr(0.75)},
		{"recall mean", s.Recall10.Mean, ptr(0.5)}, {"recall sd", s.Recall10.SD, ptr(0.1)},
	} {
		if c.got == nil || math.Abs(*c.got-*c.want) > 1e-5 {
			t.Errorf("%s = %v, want %v", c.name, c.got, *c.want)
		}
	}
	if !slices.Equal(s.Seeds, []int{1, 2, 3}) || s.Failed != 1 || s.Variant != "sft" {
		t.Errorf("summary %+v", s)
	}
	var md strings.Builder
	if err := WriteTransferMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	if w := "| x | 50% ± 25% [-12%, 112%] (25% – 75%); R@10 0.500 ± 0.100, 1 failed, 3 seeds |"; !strings.Contains(md.String(), w) {
		t.Errorf("markdown lacks %q:\n%s", w, md.String())
	}
	if png, err := TransferPNG(rows); err != nil || len(png) < 1000 {
		t.Errorf("png: %d bytes, err %v", len(png), err)
	}
}

// One seed has no spread: the table says "(1 seed)" once and the plot draws
// the bar without an error bar (it used to fail on the NaN interval).
func TestTransferOneSeedTableAndPlot(t *testing.T) {
	dir := t.TempDir()
	vs, err := SeededVariants([]TransferVariant{{Name: "sft"}}, []int{1})
	if err != nil {
		t.Fatal(err)
	}
	r := TransferRun{Variant: vs[0], EvalDir: filepath.Join(dir, "eval")}
	summaryWith(t, r.EvalDir, map[string]float64{"raw": 0.3, "concat": 0.2, "gold": 0.7, "policy": 0.5})
	rows := GatherTransfer([]TransferFold{{Name: "x", Train: []string{"/d/a.jsonl"}, Runs: []TransferRun{r}}}, [][]error{{nil}})
	var md strings.Builder
	if err := WriteTransferMarkdown(&md, rows); err != nil {
		t.Fatal(err)
	}
	if w := "| x | 50% (1 seed) |\n"; !strings.Contains(md.String(), w) {
		t.Errorf("markdown lacks %q:\n%s", w, md.String())
	}
	if png, err := TransferPNG(rows); err != nil || len(png) < 1000 {
		t.Errorf("png: %d bytes, err %v", len(png), err)
	}
}

// A --trainer-cmd run is kept on --resume only when it ran with the same
// command: its flags (the tagger's window, say) are not in the config.
func TestSameTrainerCmd(t *testing.T) {
	dir := t.TempDir()
	r := TransferRun{RunName: "sft_seed_1", RunDir: filepath.Join(dir, "sft_seed_1")}
	if same, err := sameTrainerCmd("python -m x --a 1", r); same || err != nil {
		t.Errorf("no record: same %v, err %v; want a retrain (false, nil)", same, err)
	}
	if err := os.MkdirAll(trainerDir(r), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(trainerCmdFile(r), []byte("python -m x --a 1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if same, err := sameTrainerCmd("python -m x --a 1", r); !same || err != nil {
		t.Errorf("same command: same %v, err %v", same, err)
	}
	if _, err := sameTrainerCmd("python -m x --a 2", r); err == nil || !strings.Contains(err.Error(), "another --trainer-cmd") {
		t.Errorf("another command: err %v, want one naming --trainer-cmd", err)
	}
}
