package retrieval

import (
	"strings"
	"testing"
	"time"
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

func TestReadMemories(t *testing.T) {
	path := writeFile(t, "m.jsonl", `{"user":"u","query":"a","time":"2024-01-02T03:04:05Z"}
{"user":"u","query":"b","time":1700000000}
{"user":"v","query":"c"}
`)
	got, err := ReadMemories(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].Time.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) ||
		got[1].Time.Unix() != 1700000000 || !got[2].Time.IsZero() {
		t.Fatalf("got %+v", got)
	}
	bad := writeFile(t, "b.jsonl", "{\"user\":\"u\",\"query\":\"a\",\"time\":\"yesterday\"}\n")
	if _, err := ReadMemories(bad); err == nil || !strings.Contains(err.Error(), bad+`:1: field "time"`) {
		t.Fatalf("bad time: %v", err)
	}
}
