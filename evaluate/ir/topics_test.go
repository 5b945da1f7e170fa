package ir

import (
	"reflect"
	"strings"
	"testing"
)

func TestReadRunQueriesTSVTopics(t *testing.T) {
	for _, name := range []string{"topics.tsv", "topics.txt"} { // by extension, or by content
		p := writeFile(t, name, "1001\tgarage door opener safety\r\n\n1002\twho wrote hamlet?\n")
		got, err := ReadRunQueries(p, "rewrite")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		want := []RunQuery{
			{QID: "1001", Text: "garage door opener safety", Query: "garage door opener safety"},
			{QID: "1002", Text: "who wrote hamlet?", Query: "who wrote hamlet?"},
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: got %+v, want %+v", name, got, want)
		}
	}
	for body, want := range map[string]string{
		"1\ta\n2 b\n":       "q.tsv:2: no tab: TSV topics have qid<TAB>query on every line",
		"1\ta\n\tb\n":       "q.tsv:2: empty qid before the tab",
		"1\ta\n2\t  \n":     "q.tsv:2: qid 2 has an empty query",
		"1\ta\n1\tb\n":      "q.tsv:2: duplicate qid 1 (first on line 1)",
		"q 1\ta\n":          `q.tsv:1: qid "q 1" contains whitespace`,
		"1\ta\xff\n":        "q.tsv:1: invalid UTF-8",
		"1\ta\n{\"qid\"}\n": "q.tsv:2: no tab",
	} {
		_, err := ReadRunQueries(writeFile(t, "q.tsv", body), "rewrite")
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: got %v, want %q", body, err, want)
		}
	}
	// Neither JSON nor TSV: the error names both formats.
	_, err := ReadRunQueries(writeFile(t, "q.txt", "garage door opener\n"), "rewrite")
	if err == nil || !strings.Contains(err.Error(), "q.txt:1: not a JSON object") || !strings.Contains(err.Error(), "qid<TAB>query") {
		t.Errorf("plain text queries: %v", err)
	}
}
