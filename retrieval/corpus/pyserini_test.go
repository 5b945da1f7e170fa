package corpus

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes files (relative slash paths → contents) under a new
// directory and returns it.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, body := range files {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// A Pyserini collection directory (JsonCollection: {"id", "contents"} lines
// over many files, in subdirectories too) loads as the same passages as its
// files concatenated in path order into one JSONL.
func TestLoadKBCollectionDirectory(t *testing.T) {
	files := map[string]string{
		"docs00.jsonl":     `{"id": "d1", "contents": "\"Garage doors\"\nA garage door opener lifts the door."}` + "\n" + `{"id": 2, "contents": "Second passage."}` + "\n",
		"docs01.jsonl":     `{"id": "d3", "title": "Hamlet", "contents": "A tragedy set in Denmark."}` + "\n",
		"part/docs02.json": `{"id": "d4", "contents": "Nested file."}` + "\n",
		".DS_Store/x":      "not read",
		".hidden.jsonl":    "not read either",
	}
	dir := writeTree(t, files)
	kb, err := Load(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	one := writeFile(t, "all.jsonl", files["docs00.jsonl"]+files["docs01.jsonl"]+files["part/docs02.json"])
	ref, err := Load(context.Background(), one)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(kb.Passages, ref.Passages) {
		t.Fatalf("directory %+v\nfile      %+v", kb.Passages, ref.Passages)
	}
	// By hand: the Search-R1 style contents split into title and text, the
	// numeric id read as a string.
	if p := kb.Passages[0]; p.ID != "d1" || p.Title != "Garage doors" || p.Text != "A garage door opener lifts the door." || kb.Passages[1].ID != "2" || len(kb.Passages) != 4 {
		t.Fatalf("passages %+v", kb.Passages)
	}
	// The fingerprint is stable, and changes with any file's bytes.
	again, _ := Load(context.Background(), dir)
	if again.Fingerprint != kb.Fingerprint || len(kb.Fingerprint) != 64 {
		t.Fatalf("fingerprint %q then %q", kb.Fingerprint, again.Fingerprint)
	}
	if err := os.WriteFile(filepath.Join(dir, "part", "docs02.json"), []byte(`{"id": "d4", "contents": "Nested file!"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if changed, _ := Load(context.Background(), dir); changed.Fingerprint == kb.Fingerprint {
		t.Fatal("fingerprint unchanged after a file changed")
	}
}

func TestCollectionDirectoryErrors(t *testing.T) {
	good := `{"id": "a", "contents": "x"}` + "\n"
	cases := []struct {
		name  string
		files map[string]string
		want  []string // substrings; "DIR" stands for the directory
	}{
		{"another file", map[string]string{"a.jsonl": good, "README.txt": "hi"},
			[]string{"DIR/README.txt: not a .jsonl or .json file", `{"id", "contents"}`}},
		{"compressed", map[string]string{"a.jsonl.gz": "x"},
			[]string{"DIR/a.jsonl.gz: compressed", "gunzip"}},
		{"duplicate across files", map[string]string{"a.jsonl": good, "b.jsonl": `{"id": "a", "contents": "y"}` + "\n"},
			[]string{`DIR/b.jsonl: field "id": duplicate passage id "a" (also in DIR/a.jsonl)`}},
		{"bad line", map[string]string{"a.jsonl": good + `{"contents": "y"}` + "\n"},
			[]string{`DIR/a.jsonl:2: field "id"`}},
		{"json array", map[string]string{"a.json": `[{"id": "a", "contents": "x"}]`},
			[]string{"DIR/a.json: a JSON array", "one record per line"}},
		{"no files", map[string]string{".keep": ""},
			[]string{"directory DIR has no .jsonl or .json files"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeTree(t, c.files)
			_, err := Load(context.Background(), dir)
			if err == nil {
				t.Fatal("want an error")
			}
			for _, w := range c.want {
				if w = strings.ReplaceAll(w, "DIR", dir); !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
	// The on-disk build streams one file: a directory is refused with the fix.
	dir := writeTree(t, map[string]string{"a.jsonl": good})
	_, err := OpenSource(dir, t.TempDir())
	if err == nil || !strings.Contains(err.Error(), "is a directory") || !strings.Contains(err.Error(), "> kb.jsonl") {
		t.Fatalf("disk build of a directory: %v", err)
	}
}

// A knowledge-base line that is not a JSON object says what is wanted
// rather than encoding/json's "invalid character".
func TestKBLineNotJSONSaysTheFormat(t *testing.T) {
	for body, want := range map[string]string{
		"d1\tsome text\n":        "a tab-separated line (a TSV collection, id<TAB>text?)",
		`[{"id": "a"}]` + "\n":   "a JSON array, not an object",
		"just words\n":           `not a JSON object`,
		`{"id": "a", "text": 3}`: "cannot unmarshal", // a JSON object: its own error stays
	} {
		_, err := Load(context.Background(), writeFile(t, "kb.jsonl", body))
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "kb.jsonl:1: ") {
			t.Errorf("%q: got %v, want %q", body, err, want)
		}
		if want != "cannot unmarshal" && !strings.Contains(err.Error(), `{"id", "contents"}`) {
			t.Errorf("%q: %v does not name the wanted format", body, err)
		}
	}
}

// Pyserini/Anserini TSV topics (qid<TAB>query) are read as run queries.
