package datasets

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/himes-rl/himes/internal/sharedtest"
)

// roundTripFiles are the shared files the round-trip tests use; together they
// cover string turn labels, null questions and rewrites, graded relevance,
// flat and grouped answer snippets and nested meta. (The CANARD and
// MTRAG-UN files add volume, not shapes; they are left out to keep the race
// detector run short.)
var roundTripFiles = []string{"cast2020.jsonl", "cast2021.jsonl", "cast2022.jsonl", "mtrag_human_eval_subset.jsonl", "qrecc_scai_sample.jsonl"}

func TestParquetRoundTripEqualsJSONL(t *testing.T) {
	data := sharedtest.SharedDir(t)
	for _, f := range roundTripFiles {
		t.Run(f, func(t *testing.T) {
			want, _, err := LoadContext(t.Context(), filepath.Join(data, "conversations", f), LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(t.TempDir(), "turns.parquet")
			if err := WriteParquetContext(t.Context(), p, want); err != nil {
				t.Fatal(err)
			}
			got, err := ReadParquet(t.Context(), p)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(want) {
				t.Fatalf("read %d turns, wrote %d", len(got), len(want))
			}
			for i := range want {
				if d := diffTurn(got[i], want[i]); d != "" {
					t.Fatalf("turn %d (%s) differs after Parquet round trip: %s", i, want[i].ID(), d)
				}
			}
			// Load sniffs Parquet by extension and by magic bytes alike.
			viaLoad, _, err := LoadContext(t.Context(), p, LoadOptions{})
			if err != nil || len(viaLoad) != len(want) {
				t.Fatalf("Load: %d turns, %v", len(viaLoad), err)
			}
		})
	}
}

// Writing and re-reading JSONL keeps every field; and what we write is the
// same JSON value as the source line, up to fields the schema marks optional
// when empty (title "", answer_snippets []).
func TestJSONLRoundTrip(t *testing.T) {
	if testing.Short() {
		t.Skip("long (skipped by -short): round-trips every shared conversation file")
	}
	data := sharedtest.SharedDir(t)
	for _, f := range roundTripFiles {
		t.Run(f, func(t *testing.T) {
			src := filepath.Join(data, "conversations", f)
			want, _, err := LoadContext(t.Context(), src, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range want {
				want[i].User = "" // the user key is derived at load time
			}
			out := filepath.Join(t.TempDir(), "turns.jsonl")
			if err := WriteJSONLContext(t.Context(), out, want); err != nil {
				t.Fatal(err)
			}
			got, _, err := LoadContext(t.Context(), out, LoadOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for i := range got {
				got[i].User = ""
			}
			for i := range want {
				if d := diffTurn(got[i], want[i]); d != "" {
					t.Fatalf("turn %d (%s) differs after a JSONL round trip: %s", i, want[i].ID(), d)
				}
			}
			srcLines := bytes.Split(bytes.TrimSpace(mustRead(t, src)), []byte("\n"))
			outLines := bytes.Split(bytes.TrimSpace(mustRead(t, out)), []byte("\n"))
			if len(srcLines) != len(outLines) {
				t.Fatalf("%d lines written, source has %d", len(outLines), len(srcLines))
			}
			for i := range srcLines {
				a, b := canonicalJSON(t, srcLines[i]), canonicalJSON(t, outLines[i])
				for k := range a {
					if !reflect.DeepEqual(a[k], b[k]) {
						t.Fatalf("line %d: field %s differs from the source:\n src %.300v\n out %.300v", i+1, k, a[k], b[k])
					}
				}
				if len(a) != len(b) {
					t.Fatalf("line %d: %d fields written, source has %d", i+1, len(b), len(a))
				}
			}
		})
	}
}

// canonicalJSON decodes a line generically and drops empty optional passage
// fields, the only place the writer is allowed to differ from the source.
func canonicalJSON(t *testing.T, line []byte) map[string]any {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	delete(m, "user")
	if m["question"] == nil {
		m["question"] = "" // the schema reads null as no question
	}
	ps, _ := m["passages"].([]any)
	for _, p := range ps {
		pm := p.(map[string]any)
		for _, k := range []string{"title", "text", "source"} {
			if pm[k] == "" {
				delete(pm, k)
			}
		}
		if s, ok := pm["answer_snippets"].([]any); ok && len(s) == 0 {
			delete(pm, "answer_snippets")
		}
	}
	return m
}

func mustRead(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestLoadGzip(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	zw.Write([]byte(goodLine + "\n"))
	zw.Close()
	p := filepath.Join(t.TempDir(), "d.jsonl.gz")
	if err := os.WriteFile(p, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	turns, _, err := LoadContext(t.Context(), p, LoadOptions{})
	if err != nil || len(turns) != 1 || turns[0].Answer != "Frank Herbert" {
		t.Fatalf("got %+v, %v", turns, err)
	}
}

func TestWriteIsAtomic(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "out.jsonl")
	if err := os.WriteFile(p, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A turn whose meta cannot be encoded fails the write half-way: the old
	// file must survive and no temporary file may be left behind.
	bad := []Turn{{ConvID: "a", Turn: 1, Question: "q"}, {ConvID: "a", Turn: 2, Question: "q", Meta: map[string]any{"f": func() {}}}}
	if err := WriteJSONLContext(t.Context(), p, bad); err == nil {
		t.Fatal("want an error for an unencodable meta")
	}
	if got := string(mustRead(t, p)); got != "old\n" {
		t.Errorf("file changed to %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left: %v", entries)
	}
}

// diffTurn names the first field that differs, so a failure stays readable.
func diffTurn(got, want Turn) string {
	gv, wv := reflect.ValueOf(got), reflect.ValueOf(want)
	for i := 0; i < gv.NumField(); i++ {
		if !reflect.DeepEqual(gv.Field(i).Interface(), wv.Field(i).Interface()) {
			name := gv.Type().Field(i).Name
			if name == "Passages" && len(got.Passages) == len(want.Passages) {
				for j := range got.Passages {
					if !reflect.DeepEqual(got.Passages[j], want.Passages[j]) {
						return fmt.Sprintf("passage %d: got %.300v, want %.300v", j, fmtPassage(got.Passages[j]), fmtPassage(want.Passages[j]))
					}
				}
			}
			return fmt.Sprintf("field %s: got %.300v, want %.300v", name, gv.Field(i).Interface(), wv.Field(i).Interface())
		}
	}
	return ""
}

func fmtPassage(p PassageRef) string {
	rel := "nil"
	if p.Relevance != nil {
		rel = fmt.Sprint(*p.Relevance)
	}
	return fmt.Sprintf("{id %s rel %s snippets %d (nil %v) sets %d (nil %v) source %q}", p.ID, rel, len(p.AnswerSnippets), p.AnswerSnippets == nil, len(p.AnswerSnippetSets), p.AnswerSnippetSets == nil, p.Source)
}
