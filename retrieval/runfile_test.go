package retrieval

import (
	"strings"
	"testing"
)

func TestReadRunQueries(t *testing.T) {
	path := writeFile(t, "q.jsonl", `{"qid":"q1","text":"garage door"}
{"conv_id":"c9","turn":"1-2","question":"Why?","rewrite":"Why does the door stick?"}
{"conv_id":"c9","turn":3,"question":"And now?","rewrite":null}

{"qid":"q4","text":"t","query":"orig","user":"bob"}
`)
	got, err := ReadRunQueries(path, "rewrite")
	if err != nil {
		t.Fatal(err)
	}
	want := []RunQuery{
		{QID: "q1", Text: "garage door", Query: "garage door"},
		{QID: "c9_1-2", Text: "Why does the door stick?", Query: "Why?", User: "c9"},
		{QID: "c9_3", Text: "And now?", Query: "And now?", User: "c9"},
		{QID: "q4", Text: "t", Query: "orig", User: "bob"},
	}
	if len(got) != len(want) {
		t.Fatalf("got %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d: got %+v, want %+v", i+1, got[i], want[i])
		}
	}
	qs, _ := ReadRunQueries(path, "question")
	if qs[1].Text != "Why?" {
		t.Fatalf("field question: %+v", qs[1])
	}
	bad := writeFile(t, "bad.jsonl", "{\"qid\":\"a\",\"text\":\"x\"}\n{\"text\":\"y\"}\n")
	if _, err := ReadRunQueries(bad, "rewrite"); err == nil || !strings.Contains(err.Error(), bad+`:2: field "qid"`) {
		t.Fatalf("missing qid: %v", err)
	}
}

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
