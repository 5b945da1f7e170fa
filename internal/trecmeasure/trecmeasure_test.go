package trecmeasure

import (
	"math"
	"testing"
)

// Hand-computed: ranking d1..d5, judgments d2: 2, d4: 1, d9: 3 (never
// retrieved), d1: 0 (judged, not relevant).
func TestMeasuresByHand(t *testing.T) {
	ranking := []string{"d1", "d2", "d3", "d4", "d5"}
	qrels := map[string]int{"d1": 0, "d2": 2, "d4": 1, "d9": 3}
	near := func(name string, got, want float64) {
		t.Helper()
		if math.Abs(got-want) > 1e-12 {
			t.Errorf("%s = %.15g, want %.15g", name, got, want)
		}
	}
	near("recip_rank", RecipRank(ranking, qrels), 0.5)
	near("recall_1", Recall(ranking, qrels, 1), 0)
	near("recall_3", Recall(ranking, qrels, 3), 1.0/3)
	near("recall_10", Recall(ranking, qrels, 10), 2.0/3)
	// DCG@3 = 2/log2(3); ideal@3 = 3/1 + 2/log2(3) + 1/2.
	near("ndcg_cut_3", NDCGCut(ranking, qrels, 3), (2/math.Log2(3))/(3+2/math.Log2(3)+0.5))
	// DCG@5 adds 1/log2(5) for d4 at rank 4.
	near("ndcg_cut_5", NDCGCut(ranking, qrels, 5), (2/math.Log2(3)+1/math.Log2(5))/(3+2/math.Log2(3)+0.5))
	none := map[string]int{"d1": 0}
	if RecipRank(ranking, none) != 0 || Recall(ranking, none, 10) != 0 || NDCGCut(ranking, none, 3) != 0 {
		t.Error("no relevant document: every measure must be 0")
	}
	if NumRelevant(qrels) != 3 {
		t.Errorf("NumRelevant = %d, want 3", NumRelevant(qrels))
	}
}
