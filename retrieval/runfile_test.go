package retrieval

import (
	"testing"
)

func TestPassageRanking(t *testing.T) {
	p := &Pipeline{chunkPos: map[string]int{"a#0": 0, "a#1": 1, "b#0": 2, "c#0": 3},
		chunks: []Chunk{{ID: "a#0", PassageID: "a"}, {ID: "a#1", PassageID: "a"}, {ID: "b#0", PassageID: "b"}, {ID: "c#0", PassageID: "c"}}}
	// memory off: final = first candidates, scores consistent → kept
	res := Result{
		Chunks: []Ranked{{Chunk: p.chunks[1], Score: 9}, {Chunk: p.chunks[0], Score: 8}},
		Trace:  Trace{Candidates: []Scored{{"a#1", 9}, {"a#0", 8}, {"c#0", 7}, {"b#0", 7}}},
	}
	got := p.PassageRanking(res)
	want := []Scored{{"a", 9}, {"c", 7}, {"b", 7}}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	// re-ranked: memory scores then retrieval scores → rank-derived scores
	res.Chunks = []Ranked{{Chunk: p.chunks[2], Score: 0.3}, {Chunk: p.chunks[0], Score: 0.2}}
	got = p.PassageRanking(res)
	want = []Scored{{"b", 3}, {"a", 2}, {"c", 1}}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("re-ranked: got %+v, want %+v", got, want)
		}
	}
}
