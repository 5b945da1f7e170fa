package datasets

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/himes-rl/himes/internal/testdata"
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
	data := testdata.SharedDir(t)
	turns, _, err := Load(filepath.Join(data, "conversations", "cast2022.jsonl"), LoadOptions{UserField: "topic"})
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
