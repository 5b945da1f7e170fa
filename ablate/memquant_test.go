package ablate

import (
	"math"
	"testing"
)

// Agreement on hand-made turns: float32 keeps [a b c] and activates
// [m1 m2]; the variant keeps [a c d] (2 of 3) and activates [m2] (1 of 2),
// and reverses the candidates' order (τ-b −1); one of the two turns flips
// its re-rank decision.
func TestMemQuantAgreementHandComputed(t *testing.T) {
	base := []memQuantTurn{
		{final: []string{"a", "b", "c"}, memories: []string{"m1", "m2"}, reranked: true,
			scores: map[string]float64{"a": 3, "b": 2, "c": 1}},
		{final: []string{"x"}, scores: map[string]float64{"x": 1, "y": 1}}, // constant: no τ
	}
	v := []memQuantTurn{
		{final: []string{"a", "c", "d"}, memories: []string{"m2"}, reranked: false,
			scores: map[string]float64{"a": 1, "b": 2, "c": 3}},
		{final: []string{"x"}, scores: map[string]float64{"x": 1, "y": 1}},
	}
	var row MemQuantRow
	agreement(&row, base, v)
	// overlap@k: (2/3 + 1/1)/2; memory overlap 1/2 (one turn activated)
	if math.Abs(row.OverlapK-(2.0/3+1)/2) > 1e-12 || row.MemOverlap != 0.5 || row.DecisionFlips != 0.5 {
		t.Fatalf("overlap %v, memory overlap %v, flips %v", row.OverlapK, row.MemOverlap, row.DecisionFlips)
	}
	if row.TauB != -1 || row.TauTurns != 1 {
		t.Fatalf("τ-b %v over %d turns, want -1 over 1", row.TauB, row.TauTurns)
	}
}
