package ir

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

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

// A qid given twice (or a turn's conv_id_turn twice) is refused by line:
// written, its ranking would appear twice in the run with the ranks
// restarting, a run trec_eval refuses. So are a qid holding any TREC field
// separator and a turn line without its turn.
func TestReadRunQueriesRefusesWhatTheRunCannotHold(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"{\"qid\":\"a\",\"text\":\"x\"}\n{\"qid\":\"b\",\"text\":\"y\"}\n{\"qid\":\"a\",\"text\":\"z\"}\n", `:3: field "qid": duplicate qid a (first on line 1)`},
		{"{\"conv_id\":\"c\",\"turn\":2,\"question\":\"x\"}\n{\"qid\":\"c_2\",\"text\":\"y\"}\n", `:2: field "qid": duplicate qid c_2 (first on line 1)`},
		{"{\"qid\":\"a\\rb\",\"text\":\"x\"}\n", `:1: field "qid": "a\rb" contains whitespace`},
		{"{\"conv_id\":\"c\",\"question\":\"x\"}\n", `:1: field "turn": missing`},
	} {
		path := writeFile(t, "q.jsonl", c.in)
		if _, err := ReadRunQueries(path, "rewrite"); err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%q: got %v, want …%s", c.in, err, c.want)
		}
	}
}
