package ablate

import (
	"bytes"
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/himes-rl/himes/configs"
	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
	"github.com/himes-rl/himes/rlcore"
	"github.com/himes-rl/himes/rollout"
)

// syntheticRun builds the turns, chunks and ledger records of a tiny run
// scored under own, as the training loop would log them.
//
// Group 0 (step 1), reference "blue whale", unicode tokenizer, hit=answer:
//
//	s0 "blue whale"      ctx "the largest animal is the blue whale": F1 1,   EM 1, hit 1
//	s1 "blue whale big"  ctx "nothing here":                         F1 0.8, EM 0, hit 0
//	s2 "whale"           ctx "a whale":                              F1 2/3, EM 0, hit 1
//	s3 failed (retrieval error): not scored
//
// Group 1 (step 1): every sample answers the same → zero variance.
// Group 0 (step 2): the same as step 1's group 0, so steps are kept apart.
func syntheticRun(t *testing.T, own Setting) ([]datasets.Turn, []retrieval.Chunk, []rollout.Record) {
	t.Helper()
	turns := []datasets.Turn{
		{ConvID: "c1", Turn: 2, Question: "how big is it", Answer: "blue whale"},
		{ConvID: "c2", Turn: 1, Question: "what colour", Answer: "red"},
	}
	chunks := []retrieval.Chunk{
		{ID: "p1#0", PassageID: "p1", Text: "the largest animal is the blue whale"},
		{ID: "p2#0", PassageID: "p2", Text: "nothing here"},
		{ID: "p3#0", PassageID: "p3", Text: "a whale"},
		{ID: "p4#0", PassageID: "p4", Text: "green"},
	}
	text := map[string]string{}
	for _, c := range chunks {
		text[c.ID] = c.Text
	}
	scorer, err := hser.NewScorer(own.Reward)
	if err != nil {
		t.Fatal(err)
	}
	type sample struct {
		answer, chunk string
		failed        bool
	}
	groups := []struct {
		step, group int
		turn        datasets.Turn
		samples     []sample
	}{
		{1, 0, turns[0], []sample{{"blue whale", "p1#0", false}, {"blue whale big", "p2#0", false}, {"whale", "p3#0", false}, {"", "", true}}},
		{1, 1, turns[1], []sample{{"green", "p4#0", false}, {"green", "p4#0", false}, {"green", "p4#0", false}}},
		{2, 0, turns[0], []sample{{"whale", "p3#0", false}, {"blue whale", "p1#0", false}, {"blue whale big", "p2#0", false}}},
	}
	var recs []rollout.Record
	for _, step := range []int{1, 2} {
		var in [][]rlcore.SampleReward
		var idx [][]int
		for _, g := range groups {
			if g.step != step {
				continue
			}
			var row []rlcore.SampleReward
			var ri []int
			for i, s := range g.samples {
				r := rollout.Record{Step: g.step, GroupIndex: g.group, SampleIndex: i, ConvID: g.turn.ConvID, Turn: g.turn.Turn,
					PromptID: g.turn.ID(), Question: g.turn.Question, Rewrite: "rw", Answer: s.answer}
				var sc hser.Score
				if s.failed {
					r.Error, r.ErrorKind = "retrieve: boom", "retrieve"
				} else {
					r.ChunkIDs, r.ChunkScores = []string{s.chunk}, []float64{1}
					sc = scorer.Score(s.answer, g.turn.Answer, []string{text[s.chunk]})
					r.RougeP, r.RougeR, r.RougeF1, r.EM, r.SquadF1, r.Hit = sc.RougeP, sc.RougeR, sc.RougeF1, sc.EM, sc.SquadF1, sc.Hit
					r.Alpha, r.Beta, r.Reward = sc.Alpha, sc.Beta, sc.Reward
				}
				row = append(row, rlcore.SampleReward{Valid: !s.failed, Terms: rlcore.Terms{RougeF1: sc.RougeF1, EM: sc.EM, Hit: sc.Hit}})
				ri = append(ri, len(recs))
				recs = append(recs, r)
			}
			in = append(in, row)
			idx = append(idx, ri)
		}
		adv, err := rlcore.DefaultRegistry().ComputeAdvantages(own.Advantage, rlcore.Weights{Alpha: own.Reward.Weights.Alpha, Beta: own.Reward.Weights.Beta}, in)
		if err != nil {
			t.Fatal(err)
		}
		for g := range idx {
			for k, i := range idx[g] {
				recs[i].Advantage, recs[i].Included = adv.Values[g][k], adv.Include[g][k]
			}
		}
	}
	return turns, chunks, recs
}

func TestRescoreReproducesLoggedRunAndRanksHandComputed(t *testing.T) {
	base := configs.Default()
	own := SettingOf("own", nil, base) // α = β = 1, unicode, hit=answer, group/population/sum
	turns, chunks, recs := syntheticRun(t, own)

	// Through the Parquet ledger, as a run directory stores it (a chunk file
	// next to an older himes's one-step file).
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, LedgerDir), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := rollout.WriteLedger(t.Context(), filepath.Join(dir, LedgerDir, "steps-000002-000002.parquet"), recs[7:]); err != nil {
		t.Fatal(err)
	}
	if err := rollout.WriteLedger(t.Context(), filepath.Join(dir, LedgerDir, "step-000001.parquet"), recs[:7]); err != nil {
		t.Fatal(err)
	}
	logged, err := ReadRunLedgers(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(logged) != len(recs) {
		t.Fatalf("read %d records, wrote %d", len(logged), len(recs))
	}

	grid, err := ParseGrid([]byte("alpha: [0, 1]\nbeta: [0, 1]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := RescoreSettings(grid, base)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rescore(context.Background(), logged, NewMapLookup(turns, chunks), own, settings)
	if err != nil {
		t.Fatal(err)
	}
	if len(res) != 5 || !res[0].Own {
		t.Fatalf("got %d results (own first?), want own + 4 grid points", len(res))
	}
	byName := map[string]RescoreResult{}
	for _, r := range res {
		byName[r.Name] = r
	}

	// Exact reproduction under the run's own setting (and the identical grid point).
	for _, name := range []string{"own", "alpha=1 beta=1"} {
		r := byName[name]
		if r.MaxRewardDiff != 0 || r.MaxAdvantageDiff != 0 {
			t.Fatalf("%s: rescored rewards/advantages differ from the logged ones by %g / %g", name, r.MaxRewardDiff, r.MaxAdvantageDiff)
		}
		if r.KendallTau == nil || *r.KendallTau != 1 || r.SignFlips != 0 {
			t.Fatalf("%s: τ %v flips %v, want 1 and 0 against itself", name, r.KendallTau, r.SignFlips)
		}
	}
	own0 := byName["own"]
	// 3 groups, 9 valid rollouts (one failed); group "green" has no variance.
	if own0.Groups != 3 || own0.Rollouts != 9 || math.Abs(own0.ZeroVarShare-1.0/3) > 1e-12 {
		t.Fatalf("own: %d groups %d rollouts zero-var %v, want 3, 9, 1/3", own0.Groups, own0.Rollouts, own0.ZeroVarShare)
	}

	// α = β = 0: rewards are F1 only: (1, 0.8, 2/3) vs own (3, 0.8, 5/3).
	// Within each varying group one pair of three swaps order: τ = (2−1)/3.
	r00 := byName["alpha=0 beta=0"]
	if r00.KendallTau == nil || math.Abs(*r00.KendallTau-1.0/3) > 1e-12 || r00.TauGroups != 2 {
		t.Fatalf("α=β=0: τ %v over %d groups, want 1/3 over 2", r00.KendallTau, r00.TauGroups)
	}
	// Rewards over the 9 valid rollouts: 2×(1 + 0.8 + 2/3) + 3×0 ("green" vs "red").
	if want := (2 * (1 + 0.8 + 2.0/3)) / 9; math.Abs(r00.Reward-want) > 1e-9 {
		t.Fatalf("α=β=0: mean reward %v, want %v", r00.Reward, want)
	}
	// Own rewards 3, 0.8, 5/3 (mean 1.822) → signs +, −, −; F1 only 1, 0.8,
	// 2/3 (mean 0.822) → +, −, −: nobody is pushed the other way.
	if r00.SignFlips != 0 {
		t.Fatalf("α=β=0: sign flips %v, want 0", r00.SignFlips)
	}
	if r00.MaxRewardDiff < 1.9 {
		t.Fatalf("α=β=0: max reward change vs logged %v, want 2 (EM and hit dropped)", r00.MaxRewardDiff)
	}
	// Hit is 1 for s0 and s2 and 0 for s1 and the green group: reward~hit is defined.
	if c := r00.Correlations["reward~hit"]; c == nil {
		t.Fatal("reward~hit correlation missing")
	}
	var md bytes.Buffer
	if err := WriteRescoreMarkdown(&md, res); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"| own (run's own) | 9 | 3 |", "| alpha=0 beta=0 | 9 | 3 |", "0.333 (2)", "reward~hit"} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
}

func TestRescoreSettingsRejectsSweepOnlyKeys(t *testing.T) {
	g, err := ParseGrid([]byte("reward.alpha: [0, 1]\nretrieval.top_k: [3, 5]\n"), "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, err = RescoreSettings(g, configs.Default())
	if err == nil || !strings.Contains(err.Error(), "g.yaml:2") || !strings.Contains(err.Error(), "retrieval.top_k") {
		t.Fatalf("got %v, want an error naming g.yaml:2 and retrieval.top_k", err)
	}
	g, err = ParseGrid([]byte("alpha: [0, -1]\n"), "g.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err = RescoreSettings(g, configs.Default()); err == nil || !strings.Contains(err.Error(), "alpha") {
		t.Fatalf("got %v, want a validation error for alpha=-1", err)
	}
}

// TestRescoreKeepsGuardPenalty: a rollout the training loop's guard
// penalized is logged with its real terms and the penalty as its own
// guard_penalty term; rescoring reproduces the logged reward and advantages
// exactly and keeps the penalty under every reward setting.
func TestRescoreKeepsGuardPenalty(t *testing.T) {
	base := configs.Default()
	own := SettingOf("own", nil, base)
	turns, chunks, recs := syntheticRun(t, own)
	// Step 2, group 0, sample 0 answered "whale" (F1 2/3, EM 0, hit 1:
	// reward 5/3); a guard caught its rewrite. Log it as the loop does and
	// recompute that step's logged advantages.
	var step2 []int
	for i, r := range recs {
		if r.Step == 2 {
			step2 = append(step2, i)
		}
	}
	g := recs[step2[0]]
	if g.SampleIndex != 0 || g.Answer != "whale" {
		t.Fatalf("synthetic run changed: %+v", g)
	}
	realF1 := g.RougeF1
	recs[step2[0]].Guard, recs[step2[0]].GuardPenalty, recs[step2[0]].Reward = "too_long", -1, -1
	in := make([]rlcore.SampleReward, len(step2))
	for k, i := range step2 {
		r := recs[i]
		in[k] = rlcore.SampleReward{Valid: true, Guarded: r.Guard != "", GuardPenalty: r.GuardPenalty,
			Terms: rlcore.Terms{RougeF1: r.RougeF1, EM: r.EM, Hit: r.Hit}}
	}
	adv, err := rlcore.DefaultRegistry().ComputeAdvantages(own.Advantage, rlcore.Weights{Alpha: own.Reward.Weights.Alpha, Beta: own.Reward.Weights.Beta}, [][]rlcore.SampleReward{in})
	if err != nil {
		t.Fatal(err)
	}
	for k, i := range step2 {
		recs[i].Advantage = adv.Values[0][k]
	}
	// Rewards −1, 3, 0.8: the guarded rollout is pushed down.
	if recs[step2[0]].Advantage >= 0 {
		t.Fatalf("guarded rollout advantage %v, want < 0", recs[step2[0]].Advantage)
	}
	path := filepath.Join(t.TempDir(), "ledger.parquet")
	if err := rollout.WriteLedger(t.Context(), path, recs); err != nil {
		t.Fatal(err)
	}
	logged, err := rollout.ReadLedger(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	if l := logged[step2[0]]; l.Guard != "too_long" || l.GuardPenalty != -1 || l.RougeF1 != realF1 {
		t.Fatalf("ledger round trip: guard %q penalty %v rougeL_f1 %v", l.Guard, l.GuardPenalty, l.RougeF1)
	}
	grid, err := ParseGrid([]byte("alpha: [0]\nbeta: [0]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := RescoreSettings(grid, base)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rescore(context.Background(), logged, NewMapLookup(turns, chunks), own, settings)
	if err != nil {
		t.Fatal(err)
	}
	if r := res[0]; r.MaxRewardDiff != 0 || r.MaxAdvantageDiff != 0 {
		t.Fatalf("own setting: rewards/advantages differ from the logged ones by %g / %g", r.MaxRewardDiff, r.MaxAdvantageDiff)
	}
	// The Rouge-L mean is the real one (the guarded answer's 2/3 included):
	// step 1 (1, 0.8, 2/3, green 0 ×3), step 2 (2/3, 1, 0.8).
	if want := (2*(1+0.8+2.0/3) + 0) / 9; math.Abs(res[0].RougeF1-want) > 1e-12 {
		t.Fatalf("rescored Rouge-L mean %v, want %v", res[0].RougeF1, want)
	}
	// α = β = 0: rewards are F1, except the guarded −1.
	if want := (2*(1+0.8+2.0/3) - (2.0 / 3) - 1) / 9; math.Abs(res[1].Reward-want) > 1e-12 {
		t.Fatalf("α=β=0 mean reward %v, want %v", res[1].Reward, want)
	}
}

// The rank reward rescored from the ledger's ranks: HSER vs HSER + rank.
func TestRescoreRankReward(t *testing.T) {
	base := configs.Default()
	own := SettingOf("own", nil, base)
	turns, chunks, recs := syntheticRun(t, own)
	// First relevant ranks per valid rollout, in ledger order (index 3 failed):
	// step 1 group 0: 1, 11, none; group 1 ("green" ×3): 2, 10, none;
	// step 2 group 0: 3, 1, none.
	ranks := map[int]int{0: 1, 1: 11, 2: 0, 4: 2, 5: 10, 6: 0, 7: 3, 8: 1, 9: 0}
	for i, r := range ranks {
		recs[i].Judged, recs[i].FirstRelevantRank = true, r
	}
	grid, err := ParseGrid([]byte("rank: [1]\n"), "grid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	settings, err := RescoreSettings(grid, base)
	if err != nil {
		t.Fatal(err)
	}
	res, err := Rescore(context.Background(), recs, NewMapLookup(turns, chunks), own, settings)
	if err != nil {
		t.Fatal(err)
	}
	own0, rk := res[0], res[1]
	// RankReward by hand: 2, 89/90, 0; 17/9, 1, 0; 16/9, 2, 0.
	wantMean := (2 + 89.0/90 + 17.0/9 + 1 + 16.0/9 + 2) / 9
	for _, r := range []RescoreResult{own0, rk} {
		if r.Judged != 9 || math.Abs(r.RankReward-wantMean) > 1e-12 {
			t.Errorf("%s: %d judged, mean rank reward %v; want 9 and %v", r.Name, r.Judged, r.RankReward, wantMean)
		}
	}
	// Own is HSER: the rank is recorded but weighs nothing.
	if own0.MaxRewardDiff != 0 || math.Abs(own0.ZeroVarShare-1.0/3) > 1e-12 {
		t.Errorf("own: max Δreward %v zero-var %v, want 0 and 1/3", own0.MaxRewardDiff, own0.ZeroVarShare)
	}
	// rank: 1 adds the rank reward: the largest change is 2 (rank 1), and
	// the "green" group, constant under HSER, now varies (17/9, 1, 0).
	if math.Abs(rk.MaxRewardDiff-2) > 1e-12 || rk.ZeroVarShare != 0 {
		t.Errorf("rank=1: max Δreward %v zero-var %v, want 2 and 0", rk.MaxRewardDiff, rk.ZeroVarShare)
	}
	if c := rk.Correlations["reward~rank_reward"]; c == nil || *c <= 0 {
		t.Errorf("rank=1: reward~rank_reward %v, want a positive correlation", c)
	}

	// A ledger without ranks (an unjudged turn, or an older himes) cannot
	// be rescored with reward.rank > 0.
	recs[5].Judged = false
	_, err = Rescore(context.Background(), recs, NewMapLookup(turns, chunks), own, settings)
	if err == nil || !strings.Contains(err.Error(), "reward.rank weigh retrieval terms but the ledger has none for this rollout") || !strings.Contains(err.Error(), "step 1 group 1 sample 1") {
		t.Errorf("missing rank: err %v", err)
	}
}

// TestRescoreRefusesGreedyBaseline: the greedy estimator's baseline is each
// group's greedy rollout, which the ledger does not hold; re-scoring with it
// is an error that says so and names the way out, never advantages against
// a missing baseline.
func TestRescoreRefusesGreedyBaseline(t *testing.T) {
	adv := rlcore.DefaultAdvantageConfig()
	adv.Estimator = rlcore.EstimatorGreedy
	_, err := rescoreOne(context.Background(), nil, nil, nil, Setting{Name: "scst", Reward: hser.DefaultConfig(), Advantage: adv})
	if err == nil || !strings.Contains(err.Error(), "setting scst") || !strings.Contains(err.Error(), "ledger does not hold") {
		t.Errorf("rescore with the greedy estimator: %v", err)
	}
}
