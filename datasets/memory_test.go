package datasets

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

func TestHistoricalQueries(t *testing.T) {
	rw := "What is a physician assistant?"
	turns := []Turn{
		{ConvID: "c2", Turn: 2, Question: "and then?", User: "bob"},
		{ConvID: "c1", Turn: 1, Question: "first of alice", User: "alice"},
		{ConvID: "c2", Turn: 1, Question: "first of bob", User: "bob"},
		{ConvID: "c3", Turn: 1, Question: "", Rewrite: &rw, User: "alice"},
		{ConvID: "c4", Turn: 1, Question: "no user key"},
		{ConvID: "c5", Turn: 1, Question: "repeat", User: "bob", Meta: map[string]any{"duplicate_of_earlier_path": true}},
	}
	got := HistoricalQueries(turns)
	want := []HistoricalQuery{
		{User: "bob", Query: "first of bob", Time: 1, ConvID: "c2", Turn: 1},
		{User: "bob", Query: "and then?", Time: 2, ConvID: "c2", Turn: 2},
		{User: "alice", Query: "first of alice", Time: 1, ConvID: "c1", Turn: 1},
		{User: "alice", Query: rw, Time: 2, ConvID: "c3", Turn: 1},
		{User: "c4", Query: "no user key", Time: 1, ConvID: "c4", Turn: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// CAsT 2022 by topic: 18 topics; the repeated prefixes of the tree paths
// (meta.duplicate_of_earlier_path) are not remembered twice.
func TestHistoricalQueriesCAsT2022ByTopic(t *testing.T) {
	data := sharedtest.SharedDir(t)
	turns, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "cast2022.jsonl"), LoadOptions{UserField: "topic"})
	if err != nil {
		t.Fatal(err)
	}
	hq := HistoricalQueries(turns)
	users := map[string]int64{}
	dups := 0
	for _, tr := range turns {
		if tr.Meta["duplicate_of_earlier_path"] == true {
			dups++
		}
	}
	for _, q := range hq {
		if q.Time != users[q.User]+1 {
			t.Fatalf("user %s: time %d after %d", q.User, q.Time, users[q.User])
		}
		users[q.User] = q.Time
	}
	if len(users) != 18 || len(hq) != len(turns)-dups {
		t.Errorf("%d users and %d queries, want 18 and %d", len(users), len(hq), len(turns)-dups)
	}
	if b, err := json.Marshal(hq[0]); err != nil || string(b) != `{"user":"132","query":"I remember Glasgow hosting COP26 last year, but unfortunately I was out of the loop. What was it about?","time":1,"conv_id":"cast22-132-path1","turn":1}` {
		t.Errorf("first query: %s %v", b, err)
	}
}

func TestLoadMemoryFields(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	opts := LoadOptions{MemoryField: "meta.ptkb", MemoryLabelsField: "meta.rel"}
	good := write("good.jsonl", `{"conv_id":"c","turn":1,"history":[],"question":"q1","rewrite":null,"answer":"","passages":[],"meta":{"ptkb":{"10":"I like tea.","2":"I live in Utrecht."},"rel":[2]}}
{"conv_id":"d","turn":1,"history":[],"question":"q2","rewrite":null,"answer":"","passages":[],"meta":{"ptkb":["I am 26.",{"id":"x","text":"I cycle."}],"rel":"x"}}
`)
	turns, _, err := LoadContext(t.Context(), good, opts)
	if err != nil {
		t.Fatal(err)
	}
	// map ids in numeric order; list items by position or their own id
	if fmt.Sprint(turns[0].Facts) != "[{2 I live in Utrecht.} {10 I like tea.}]" || fmt.Sprint(turns[0].MemoryLabels) != "[2]" ||
		fmt.Sprint(turns[1].Facts) != "[{1 I am 26.} {x I cycle.}]" || fmt.Sprint(turns[1].MemoryLabels) != "[x]" {
		t.Fatalf("got %+v / %+v", turns[0], turns[1])
	}
	for _, c := range []struct{ meta, want string }{
		{`{"ptkb":"I like tea."}`, `:1: field "meta.ptkb": want a map id → statement or a list of statements, got a string`},
		{`{"ptkb":{"1":5}}`, `:1: field "meta.ptkb.1": want a string statement, got a number`},
		{`{"ptkb":[{"text":"a"}]}`, `:1: field "meta.ptkb[0].id": is missing`},
		{`{"ptkb":{"1":"a"},"rel":[3]}`, `:1: field "meta.rel[0]": id "3" names no memory in meta.ptkb`},
		{`{"ptkb":{"1":"a"},"rel":[true]}`, `:1: field "meta.rel[0]": want a memory id (string or integer), got a boolean`},
	} {
		bad := write("bad.jsonl", `{"conv_id":"c","turn":1,"history":[],"question":"q","rewrite":null,"answer":"","passages":[],"meta":`+c.meta+"}\n")
		if _, _, err := LoadContext(t.Context(), bad, opts); err == nil || !strings.Contains(err.Error(), bad+c.want) {
			t.Errorf("%s: got %v, want …%s", c.meta, err, c.want)
		}
	}
	if _, _, err := LoadContext(t.Context(), good, LoadOptions{MemoryField: "ptkb"}); err == nil || !strings.Contains(err.Error(), "meta.<key>") {
		t.Errorf("memory field without meta.: %v", err)
	}
}

// The shared iKAT 2023 file (data README: 95 turns, 11 conversations, 42
// turns with labelled relevant statements): every user's facts and
// questions, with questions ordered and facts visible from the start.
func TestUserMemoriesIKAT(t *testing.T) {
	data := sharedtest.SharedDir(t)
	turns, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", "ikat2023_train_memory.jsonl"),
		LoadOptions{MemoryField: "meta.ptkb", MemoryLabelsField: "meta.ptkb_provenance"})
	if err != nil {
		t.Fatal(err)
	}
	labelled, facts := 0, map[string]int{}
	for _, tr := range turns {
		if len(tr.MemoryLabels) > 0 {
			labelled++
		}
		facts[tr.User] = len(tr.Facts)
	}
	nFacts := 0
	for _, n := range facts {
		nFacts += n
	}
	if len(turns) != 95 || labelled != 42 || len(facts) != 11 {
		t.Fatalf("%d turns, %d labelled, %d users; want 95, 42, 11", len(turns), labelled, len(facts))
	}
	mems, err := UserMemories(turns)
	if err != nil {
		t.Fatal(err)
	}
	if len(mems) != nFacts+95 {
		t.Fatalf("%d memories, want %d facts + 95 questions", len(mems), nFacts)
	}
	last := map[string]int64{}
	for _, m := range mems {
		switch {
		case strings.HasPrefix(m.ID, "q:"):
			if m.Seq != last[m.User]+1 {
				t.Fatalf("%s %s: seq %d after %d", m.User, m.ID, m.Seq, last[m.User])
			}
			last[m.User] = m.Seq
		case m.Seq != 0:
			t.Fatalf("fact %s/%s has seq %d", m.User, m.ID, m.Seq)
		}
	}
	// a fact id with two texts in one user's turns is an error
	turns[1].Facts = []Fact{{ID: turns[0].Facts[0].ID, Text: "changed"}}
	if _, err := UserMemories(turns); err == nil || !strings.Contains(err.Error(), "changed") {
		t.Errorf("conflicting fact: %v", err)
	}
}
