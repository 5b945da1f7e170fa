package ablate

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/hser"
	"github.com/himes-rl/himes/retrieval"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12 }

// Agree on two groups worked by hand (stats' Spearman test derives the
// single-group values):
//
//	G1: hser gold (1,2,3,4), rank (4,3,2,1), hser answer constant;
//	    R@10 (1,3,2,4): τ 2/3, ρ 0.8 (rank: −2/3, −0.8); NDCG@3 constant.
//	G2: every reward (0,1,1); R@10 (1,2,3): τ 2/√6, ρ √3/2;
//	    NDCG@3 (0.5,0.5,1): τ-b 1/√(2·2) = 0.5, ρ 0.75/1.5 = 0.5.
func TestAgreeHandComputed(t *testing.T) {
	g := []AgreementGroup{
		{Turn: "G1", Rewards: map[string][]float64{RewardHSERGold: {1, 2, 3, 4}, RewardHSERAnswer: {1, 1, 1, 1}, RewardRank: {4, 3, 2, 1}},
			Metrics: map[string][]float64{MetricRecall10: {1, 3, 2, 4}, MetricNDCG3: {0, 0, 0, 0}}},
		{Turn: "G2", Rewards: map[string][]float64{RewardHSERGold: {0, 1, 1}, RewardHSERAnswer: {0, 1, 1}, RewardRank: {0, 1, 1}},
			Metrics: map[string][]float64{MetricRecall10: {1, 2, 3}, MetricNDCG3: {0.5, 0.5, 1}}},
	}
	rows, err := Agree(g)
	if err != nil {
		t.Fatal(err)
	}
	s6, s3 := math.Sqrt(6), math.Sqrt(3)
	want := []struct {
		tau, rho              float64
		groups, varies, blind int
	}{
		{(2.0/3 + 2/s6) / 2, (0.8 + s3/2) / 2, 2, 2, 0},   // hser gold × R@10
		{0.5, 0.5, 1, 1, 0},                               // hser gold × NDCG@3
		{2 / s6, s3 / 2, 1, 2, 1},                         // hser answer × R@10 (blind on G1)
		{0.5, 0.5, 1, 1, 0},                               // hser answer × NDCG@3
		{(-2.0/3 + 2/s6) / 2, (-0.8 + s3/2) / 2, 2, 2, 0}, // rank × R@10
		{0.5, 0.5, 1, 1, 0},                               // rank × NDCG@3
	}
	if len(rows) != len(want) {
		t.Fatalf("%d rows, want %d", len(rows), len(want))
	}
	for i, w := range want {
		r := rows[i]
		if r.Tau == nil || r.Rho == nil || !near(*r.Tau, w.tau) || !near(*r.Rho, w.rho) || r.Groups != w.groups || r.MetricVaries != w.varies || r.Blind != w.blind {
			t.Errorf("row %d (%s × %s): τ %v ρ %v groups %d varies %d blind %d; want %v %v %d %d %d",
				i, r.Reward, r.Metric, deref(r.Tau), deref(r.Rho), r.Groups, r.MetricVaries, r.Blind, w.tau, w.rho, w.groups, w.varies, w.blind)
		}
	}
	if _, err := Agree([]AgreementGroup{{Turn: "bad", Rewards: map[string][]float64{RewardHSERGold: {1}}, Metrics: map[string][]float64{MetricRecall10: {1, 2}}}}); err == nil {
		t.Error("mismatched lengths: no error")
	}
}

func deref(p *float64) float64 {
	if p == nil {
		return math.NaN()
	}
	return *p
}

// wordRetriever ranks the passages a rewrite names, in order ("p2 p1":
// p2 then p1); only the first is handed to the responder.
type wordRetriever struct{}

func (wordRetriever) Retrieve(_ context.Context, _, rewrite, _ string) (retrieval.Result, error) {
	var res retrieval.Result
	words := strings.Fields(strings.ToLower(rewrite))
	for i, w := range words {
		sc := retrieval.Scored{ID: w + "#0", Score: float64(len(words) - i)}
		res.Trace.Candidates = append(res.Trace.Candidates, sc)
		if i == 0 {
			res.Chunks = append(res.Chunks, retrieval.Ranked{Chunk: retrieval.Chunk{ID: sc.ID, PassageID: w, Text: "text " + w}, Score: sc.Score})
		}
	}
	return res, nil
}

// topResponder answers with the top chunk's text.
type topResponder struct{}

func (topResponder) Name() string { return "top" }
func (topResponder) Respond(_ context.Context, _ string, chunks []retrieval.Ranked) (string, error) {
	return chunks[0].Text, nil
}

// One judged turn (p1 relevant, reference "text p1"), worked by hand:
//
//	rewrite  ranking  first rel.  rank reward  R@10  NDCG@3   answer    hser gold       hser answer
//	"p2 p1"  p2 p1    2           17/9         1     1/log2 3 "text p2" F1 .5 → 0.5     .5 + hit 1 → 1.5
//	"p1 p2"  p1 p2    1           2            1     1        "text p1" 1+1+1 → 3       3
//	"p3"     p3       none        0            0     0        "text p3" 0.5             1.5
//	"p1"     p1       1           2            1     1        "text p1" 3               3
//
// The concat rewrite equals the raw question and the second sample the
// human rewrite: both are dropped. Unjudged and answerless turns are left
// out and counted.
func TestMeasureAgreementHandComputed(t *testing.T) {
	one := 1
	rw := "p1 p2"
	turns := []datasets.Turn{
		{ConvID: "c", Turn: 1, Question: "p2 p1", Rewrite: &rw, Answer: "text p1", Passages: []datasets.PassageRef{{ID: "p1", Relevance: &one}}},
		{ConvID: "c", Turn: 2, Question: "p1", Answer: "text p1"},                                            // unjudged
		{ConvID: "c", Turn: 3, Question: "p1", Passages: []datasets.PassageRef{{ID: "p1", Relevance: &one}}}, // no answer
	}
	sample := func(_ context.Context, ts []datasets.Turn) ([][]string, error) {
		if len(ts) != 1 {
			t.Fatalf("sampler got %d turns, want the 1 judged turn with an answer", len(ts))
		}
		return [][]string{{"p3", "P1  p2", "p1"}}, nil
	}
	set, groups, err := MeasureAgreement(context.Background(), AgreementInput{Name: "toy", Data: "toy.jsonl", Turns: turns,
		Retrieve: wordRetriever{}, Responder: topResponder{}, Reward: hser.DefaultConfig(), Sample: sample, SampleLabel: "3 samples"})
	if err != nil {
		t.Fatal(err)
	}
	if set.Turns != 1 || set.Unjudged != 1 || set.NoAnswer != 1 || set.Rewrites != 4 || len(groups) != 1 {
		t.Fatalf("set %+v", set)
	}
	g := groups[0]
	check := func(what string, got, want []float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", what, got, want)
		}
		for i := range want {
			if !near(got[i], want[i]) {
				t.Errorf("%s[%d] = %v, want %v", what, i, got[i], want[i])
			}
		}
	}
	check("rank", g.Rewards[RewardRank], []float64{17.0 / 9, 2, 0, 2})
	// First relevant ranks 2, 1, none, 1 (the rank reward's), one judged passage.
	check("rr", g.Rewards[RewardRR], []float64{0.5, 1, 0, 1})
	check("recall@10", g.Rewards[RewardRecall], []float64{1, 1, 0, 1})
	check("ndcg@3", g.Rewards[RewardNDCG], []float64{1 / math.Log2(3), 1, 0, 1})
	check("R@10", g.Metrics[MetricRecall10], []float64{1, 1, 0, 1})
	check("NDCG@3", g.Metrics[MetricNDCG3], []float64{1 / math.Log2(3), 1, 0, 1})
	check("hser gold", g.Rewards[RewardHSERGold], []float64{0.5, 3, 0.5, 3})
	check("hser answer", g.Rewards[RewardHSERAnswer], []float64{1.5, 3, 1.5, 3})
	// hser gold (.5,3,.5,3) × R@10 (1,1,0,1): of 6 pairs 2 concordant, none
	// discordant, 2 tied in the reward, 3 in R@10: τ-b = 2/√(4·3).
	if r := set.Rows[0]; r.Reward != RewardHSERGold || r.Metric != MetricRecall10 || r.Tau == nil || !near(*r.Tau, 2/math.Sqrt(12)) {
		t.Errorf("hser gold × R@10 row %+v, want τ %v", r, 2/math.Sqrt(12))
	}
	// rank (17/9,2,0,2) × NDCG@3 (.63,1,0,1): identical orders, τ-b 1.
	if r := set.Rows[5]; r.Tau == nil || !near(*r.Tau, 1) || !near(*r.Rho, 1) {
		t.Errorf("rank × NDCG@3 row %+v, want τ = ρ = 1", r)
	}
	if !strings.Contains(AgreementMarkdown([]AgreementSet{set}), "| toy | rank (ConvSearch-R1) | NDCG@3 | 1.000 | 1.000 | 1 | 0/1 |") {
		t.Errorf("markdown:\n%s", AgreementMarkdown([]AgreementSet{set}))
	}
}

// With SamplesOnly a group is the distinct samples alone.
func TestAgreementSamplesOnly(t *testing.T) {
	one := 1
	turn := datasets.Turn{ConvID: "c", Turn: 1, Question: "p2 p1", Answer: "text p1", Passages: []datasets.PassageRef{{ID: "p1", Relevance: &one}}}
	sample := func(context.Context, []datasets.Turn) ([][]string, error) { return [][]string{{"p3", "p1", "P1"}}, nil }
	set, groups, err := MeasureAgreement(context.Background(), AgreementInput{Name: "toy", Turns: []datasets.Turn{turn},
		Retrieve: wordRetriever{}, Responder: topResponder{}, Reward: hser.DefaultConfig(), Sample: sample, SampleLabel: "s", SamplesOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	if set.Rewrites != 2 || set.Sources != "s" {
		t.Fatalf("rewrites %d sources %q, want 2 (p3, p1) and \"s\"", set.Rewrites, set.Sources)
	}
	if got := groups[0].Rewards[RewardRank]; len(got) != 2 || got[0] != 0 || got[1] != 2 {
		t.Errorf("rank rewards %v, want [0 2]", got)
	}
	if _, _, err := MeasureAgreement(context.Background(), AgreementInput{Turns: []datasets.Turn{turn}, SamplesOnly: true}); err == nil {
		t.Error("samples only without a sampler: no error")
	}
}
