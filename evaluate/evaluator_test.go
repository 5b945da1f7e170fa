package evaluate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/himes-rl/himes/datasets"
	"github.com/himes-rl/himes/internal/stats"
	"github.com/himes-rl/himes/retrieval"
)

// The ranking d3 d1 d2 x1…x8 d5 (scores 12 down to 1) against d1 (grade
// 2), d2 and d5 (grade 1) and d9 (judged, not relevant):
//
//	recip_rank  first relevant (d1) at rank 2: 1/2
//	ndcg_cut_3  DCG 2/log2(3) + 1/log2(4); ideal gains 2 1 1: 2/log2(2) + 1/log2(3) + 1/log2(4)
//	recall_10   d1 d2 of 3 relevant in the top 10: 2/3
//	recall_100  d5 at rank 12 counts too: 3/3
func TestScoreRankingHandComputed(t *testing.T) {
	ids := []string{"d3", "d1", "d2", "x1", "x2", "x3", "x4", "x5", "x6", "x7", "x8", "d5"}
	run := make([]retrieval.Scored, len(ids))
	for i, id := range ids {
		run[i] = retrieval.Scored{ID: id, Score: float64(len(ids) - i)}
	}
	qrels := map[string]int{"d1": 2, "d2": 1, "d5": 1, "d9": 0}
	got := ScoreRanking(run, qrels)
	want := RankingScores{
		RecipRank: 0.5,
		NDCG3:     (2/math.Log2(3) + 1/math.Log2(4)) / (2 + 1/math.Log2(3) + 1/math.Log2(4)),
		Recall10:  2.0 / 3,
		Recall100: 1,
	}
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"recip_rank", got.RecipRank, want.RecipRank}, {"ndcg_cut_3", got.NDCG3, want.NDCG3},
		{"recall_10", got.Recall10, want.Recall10}, {"recall_100", got.Recall100, want.Recall100},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}

	// trec_eval ranks by score, ties by docno descending: b before a, and
	// the order the run lists them in does not matter.
	tie := ScoreRanking([]retrieval.Scored{{ID: "a", Score: 1}, {ID: "b", Score: 1}}, map[string]int{"a": 1})
	if tie.RecipRank != 0.5 || tie.Recall10 != 1 || math.Abs(tie.NDCG3-1/math.Log2(3)) > 1e-12 {
		t.Errorf("tie: %+v, want recip_rank 1/2, recall 1, ndcg 1/log2(3)", tie)
	}
	// A judged turn without a relevant passage scores 0 everywhere.
	if z := ScoreRanking(run, map[string]int{"d9": 0}); z != (RankingScores{}) {
		t.Errorf("no relevant passage: %+v, want zeros", z)
	}
}

func turnsOf(ids ...string) []datasets.Turn {
	out := make([]datasets.Turn, len(ids))
	for i, id := range ids {
		var conv string
		var turn int
		if _, err := fmt.Sscanf(id, "%1s%d", &conv, &turn); err != nil {
			panic(err)
		}
		out[i] = datasets.Turn{ConvID: conv, Turn: turn}
	}
	return out
}

// Conversations in order of first appearance, each conversation's turns in
// turn order, whatever order the input lists them in.
func TestConversationsHandMade(t *testing.T) {
	turns := turnsOf("a2", "b1", "a1", "c5", "b2", "a3")
	got := fmt.Sprint(Conversations(turns))
	if want := "[[2 0 5] [1 4] [3]]"; got != want {
		t.Fatalf("Conversations = %s, want %s", got, want)
	}
	if got := Conversations(nil); len(got) != 0 {
		t.Fatalf("no turns: %v", got)
	}
}

// Invariants on shuffled input: every turn in exactly one group, a group
// holds one conversation and all of it, groups in order of first appearance,
// turns in turn order.
func TestConversationsInvariants(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for trial := range 50 {
		var turns []datasets.Turn
		for c := range 1 + rng.IntN(6) {
			for k := range 1 + rng.IntN(5) {
				turns = append(turns, datasets.Turn{ConvID: fmt.Sprintf("c%d", c), Turn: k + 1})
			}
		}
		rng.Shuffle(len(turns), func(i, j int) { turns[i], turns[j] = turns[j], turns[i] })
		convs := Conversations(turns)
		seen := make([]bool, len(turns))
		owner := map[string]int{}
		firstAt := -1
		for g, idx := range convs {
			if len(idx) == 0 {
				t.Fatalf("trial %d: empty group %d", trial, g)
			}
			conv := turns[idx[0]].ConvID
			if _, dup := owner[conv]; dup {
				t.Fatalf("trial %d: conversation %s in two groups", trial, conv)
			}
			owner[conv] = g
			first := len(turns)
			for k, i := range idx {
				if seen[i] {
					t.Fatalf("trial %d: turn %d twice", trial, i)
				}
				seen[i] = true
				first = min(first, i)
				if turns[i].ConvID != conv {
					t.Fatalf("trial %d: group %d mixes %s and %s", trial, g, conv, turns[i].ConvID)
				}
				if k > 0 && turns[idx[k-1]].Turn > turns[i].Turn {
					t.Fatalf("trial %d: group %d out of turn order: %v", trial, g, idx)
				}
			}
			if first <= firstAt {
				t.Fatalf("trial %d: group %d first appears at %d, before the previous group (%d)", trial, g, first, firstAt)
			}
			firstAt = first
		}
		for i, ok := range seen {
			if !ok {
				t.Fatalf("trial %d: turn %d in no group", trial, i)
			}
		}
	}
}

// Estimate averages over the turns that have a value, whatever their
// conversation; a conversation sum of 1 over 2 turns and one of 0.5 over 1
// turn give every resample the mean 0.5, so the interval is [0.5, 0.5].
func TestEstimateHandComputed(t *testing.T) {
	turns := turnsOf("a1", "b1", "a2", "c1")
	convs := Conversations(turns)
	nan := math.NaN()
	cfg := DefaultStats(7)
	est, err := Estimate(convs, []float64{1, 0.5, 0, nan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if est.Mean != 0.5 || est.Lo != 0.5 || est.Hi != 0.5 || est.Turns != 3 {
		t.Fatalf("estimate %+v, want mean and interval 0.5 over 3 turns", est)
	}
	// Unequal conversations: the interval brackets the mean, (1+0+1)/3.
	est, err = Estimate(convs, []float64{1, 0, 1, nan}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(est.Mean-2.0/3) > 1e-15 || !(est.Lo < est.Mean && est.Mean < est.Hi) {
		t.Fatalf("estimate %+v, want mean 2/3 strictly inside its interval", est)
	}
	// A conversation's turns listed in another order group the same way and
	// give the same estimate bit for bit (the seed fixes the resamples).
	perm := []int{2, 1, 0, 3}
	shuffled, vals := make([]datasets.Turn, 4), make([]float64, 4)
	for k, i := range perm {
		shuffled[k], vals[k] = turns[i], []float64{1, 0, 1, nan}[i]
	}
	again, err := Estimate(Conversations(shuffled), vals, cfg)
	if err != nil || again.Lo != est.Lo || again.Hi != est.Hi {
		t.Fatalf("reordered input: %+v (%v), want %+v", again, err, est)
	}
	if _, err := Estimate(convs, []float64{nan, nan, nan, nan}, cfg); !errors.Is(err, stats.ErrNoData) {
		t.Fatalf("no values: %v, want stats.ErrNoData", err)
	}
}

// Compare pairs turn by turn and leaves out a turn either side lacks:
// differences 1 and 0 (the third turn has no baseline value), mean 1/2.
func TestCompareHandComputed(t *testing.T) {
	convs := Conversations(turnsOf("a1", "a2", "b1"))
	nan := math.NaN()
	c, err := Compare(convs, []float64{1, 0, 1}, []float64{0, 0, nan}, DefaultStats(7))
	if err != nil {
		t.Fatal(err)
	}
	if c.Diff != 0.5 || c.Turns != 2 {
		t.Fatalf("comparison %+v, want diff 1/2 over 2 turns", c)
	}
	if _, err := Compare(convs, []float64{1, 0, 1}, []float64{0, 0}, DefaultStats(7)); err == nil {
		t.Fatal("different lengths: no error")
	}
}
