package corpus

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadErrorsNameFileAndLine(t *testing.T) {
	cases := []struct {
		name, content, want string
	}{
		{"dup", "{\"id\":\"a\",\"text\":\"x\"}\n\n{\"id\":\"a\",\"text\":\"y\"}\n", `:3: field "id": duplicate passage id "a" (first at 1)`},
		{"empty", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\"  \"}\n", `:2: field "text": empty text`},
		{"utf8", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"b\",\"text\":\"bad \xff byte\"}\n", ":2: invalid UTF-8"},
		{"noid", "{\"title\":\"t\",\"text\":\"x\"}\n", `:1: field "id": missing`},
		{"json", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\": \"b\", \"text\": 3}\n", ":2: json: cannot unmarshal number"},
		{"idtype", "{\"id\": true, \"text\": \"x\"}\n", `:1: field "id": want a string or a number, got true`},
		// Pyserini/Anserini JsonCollection records.
		{"both", "{\"id\":\"a\",\"text\":\"x\",\"contents\":\"y\"}\n", `:1: fields "text" and "contents"`},
		{"nocontents", "{\"id\":\"a\",\"contents\":\"x\"}\n{\"id\":\"b\",\"contents\":\"\"}\n", `:2: field "contents": empty text for passage "b"`},
		{"idspace", "{\"id\":\"a\",\"text\":\"x\"}\n{\"id\":\"doc 2\",\"text\":\"y\"}\n", `:2: field "id": passage id "doc 2" contains whitespace`},
		{"idtab", "{\"id\":\"doc\\t2\",\"contents\":\"y\"}\n", `:1: field "id": passage id "doc\t2" contains whitespace`},
		{"pyserinidup", "{\"id\":7,\"contents\":\"x\"}\n{\"id\":\"7\",\"contents\":\"y\"}\n", `:2: field "id": duplicate passage id "7"`},
	}
	for _, c := range cases {
		path := writeFile(t, c.name+".jsonl", c.content)
		_, err := Load(t.Context(), path)
		if err == nil || !strings.Contains(err.Error(), path+c.want) {
			t.Errorf("%s: got error %v, want it to contain %q", c.name, err, path+c.want)
		}
	}
}

// TestLoadPyserini reads a Pyserini/Anserini JsonCollection: {id,
// contents}, numeric ids as Anserini reads them, Search-R1's
// `"Title"\ntext` contents split into title and text, a separate title
// keeping contents whole.
func TestLoadPyserini(t *testing.T) {
	path := writeFile(t, "collection.jsonl", `{"id": "0", "contents": "\"Aaron\"\nAaron is a prophet, high priest."}
{"id": 12, "contents": "The Manhattan Project was a research effort."}
{"id": "x", "title": "T", "contents": "\"Q\"\nkept whole"}
{"id": "y", "contents": "\"only a quoted line\""}
`)
	kb, err := Load(t.Context(), path)
	if err != nil {
		t.Fatal(err)
	}
	want := []Passage{
		{ID: "0", Title: "Aaron", Text: "Aaron is a prophet, high priest."},
		{ID: "12", Text: "The Manhattan Project was a research effort."},
		{ID: "x", Title: "T", Text: "\"Q\"\nkept whole"},
		{ID: "y", Text: `"only a quoted line"`},
	}
	if !reflect.DeepEqual(kb.Passages, want) {
		t.Errorf("passages:\n got %+v\nwant %+v", kb.Passages, want)
	}
}

func TestLoadRealFile(t *testing.T) {
	kb, err := Load(t.Context(), filepath.Join(sharedtest.SharedDir(t), "kb", "passages.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if len(kb.Passages) != 4040 {
		t.Fatalf("%d passages, the README says 4,040", len(kb.Passages))
	}
}

func TestChunkPassages(t *testing.T) {
	ps := []Passage{{ID: "p", Title: "T", Text: "a b c d e f g"}, {ID: "q", Text: "x y"}}
	got, err := ChunkPassages(ps, 3, 2)
	if err != nil {
		t.Fatal(err)
	}
	want := []Chunk{
		{ID: "p#0", PassageID: "p", Title: "T", Text: "a b c"},
		{ID: "p#1", PassageID: "p", Title: "T", Text: "c d e"},
		{ID: "p#2", PassageID: "p", Title: "T", Text: "e f g"},
		{ID: "q#0", PassageID: "q", Text: "x y"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	whole, _ := ChunkPassages(ps, 0, 0)
	if len(whole) != 2 || whole[0].Text != ps[0].Text || whole[0].ID != "p#0" {
		t.Fatalf("words=0: got %+v", whole)
	}
	if _, err := ChunkPassages(ps, 3, 4); err == nil {
		t.Fatal("stride > window accepted")
	}
}

// Item 6 of issue 33: a knowledge base starting with a UTF-8 byte-order
// mark loads (whole and streamed) as the same file without it, as the
// conversation loaders accept one.
func TestLoadAcceptsByteOrderMark(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "kb.jsonl")
	if err := os.WriteFile(p, []byte("\ufeff"+`{"id":"a","text":"alpha beta"}`+"\n"+`{"id":"b","title":"T","text":"gamma"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kb, err := Load(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Passage{{ID: "a", Text: "alpha beta"}, {ID: "b", Title: "T", Text: "gamma"}}
	if !reflect.DeepEqual(kb.Passages, want) {
		t.Fatalf("passages %+v, want %+v", kb.Passages, want)
	}
	src, err := OpenSource(p, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	refs, err := src.Scan(context.Background(), 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(refs) != 2 {
		t.Fatalf("%d chunks streamed, want 2", len(refs))
	}
	for i, r := range refs {
		c, err := src.Chunk(r)
		if err != nil {
			t.Fatal(err)
		}
		if c.PassageID != want[i].ID || c.Text != want[i].Text {
			t.Fatalf("streamed chunk %d: %+v, want passage %+v", i, c, want[i])
		}
	}
}
