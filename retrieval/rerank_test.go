package retrieval

import (
	"math"
	"testing"
)

func TestRerankHandComputed(t *testing.T) {
	cands := []Ranked{
		{Chunk: Chunk{ID: "c1"}, Score: 10},
		{Chunk: Chunk{ID: "c2"}, Score: 5},
		{Chunk: Chunk{ID: "c3"}, Score: 0},
	}
	cv := [][]float32{{1, 0}, {0, 1}, {0.8, 0.6}}
	hv := [][]float32{{1, 0}, {0.6, 0.8}}
	// mean cosines: c1 (1 + 0.6)/2 = 0.8, c2 (0 + 0.8)/2 = 0.4, c3 (0.8 + 0.96)/2 = 0.88
	got, err := Rerank(cands, cv, hv, 0)
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		id    string
		score float64
	}{{"c3", 0.88}, {"c1", 0.8}, {"c2", 0.4}}
	for i, w := range want {
		if got[i].ID != w.id || math.Abs(got[i].Score-w.score) > 1e-6 {
			t.Errorf("pure rank %d: got %s %.6f, want %s %.6f", i+1, got[i].ID, got[i].Score, w.id, w.score)
		}
	}
	// λ-fusion with w = 0.5: retrieval normalized to 1, 0.5, 0
	// c1 0.5·0.8 + 0.5·1 = 0.9, c2 0.5·0.4 + 0.25 = 0.45, c3 0.5·0.88 + 0 = 0.44
	got, _ = Rerank(cands, cv, hv, 0.5)
	want = []struct {
		id    string
		score float64
	}{{"c1", 0.9}, {"c2", 0.45}, {"c3", 0.44}}
	for i, w := range want {
		if got[i].ID != w.id || math.Abs(got[i].Score-w.score) > 1e-6 {
			t.Errorf("fused rank %d: got %s %.6f, want %s %.6f", i+1, got[i].ID, got[i].Score, w.id, w.score)
		}
	}
	// no memories: retrieval order and scores untouched
	got, _ = Rerank(cands, cv, nil, 0)
	for i := range cands {
		if got[i] != cands[i] {
			t.Fatalf("empty H_n changed the ranking: %+v", got)
		}
	}
}
