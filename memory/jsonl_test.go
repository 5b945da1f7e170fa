package memory

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestReadJSONL(t *testing.T) {
	path := writeFile(t, "m.jsonl", `{"user":"u","query":"a","time":"2024-01-02T03:04:05Z"}
{"user":"u","query":"b","time":1700000000}
{"user":"v","query":"c"}
`)
	got, err := ReadJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || !got[0].Time.Equal(time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)) ||
		got[1].Time.Unix() != 1700000000 || !got[2].Time.IsZero() {
		t.Fatalf("got %+v", got)
	}
	bad := writeFile(t, "b.jsonl", "{\"user\":\"u\",\"query\":\"a\",\"time\":\"yesterday\"}\n")
	if _, err := ReadJSONL(bad); err == nil || !strings.Contains(err.Error(), bad+`:1: field "time"`) {
		t.Fatalf("bad time: %v", err)
	}
}

func TestReadJSONLShapes(t *testing.T) {
	path := writeFile(t, "m.jsonl", `{"user":"u","id":7,"text":"I am vegetarian.","importance":0.5,"entities":["Vegetarian"]}
{"user":"u","text":"I live in Utrecht.","topic":"travel","subtopic":"destinations"}
{"user":"v","query":"old question","time":1700000000}
`)
	got, err := ReadJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 3 || got[0].ID != "7" || got[0].Importance != 0.5 || !slices.Equal(got[0].Entities, []string{"vegetarian"}) ||
		got[1].ID != "m2" || got[1].Topic != "travel" || got[2].ID != "m1" || got[2].Text != "old question" || got[2].Time.Unix() != 1700000000 {
		t.Fatalf("got %+v", got)
	}
	for _, c := range []struct{ line, want string }{
		{`{"user":"u","text":5}`, `:1: field "text": want string, got number`},
		{`{"user":"u","text":"a","importance":2}`, `:1: field "importance": must be in [0, 1]`},
		{`{"user":"u","text":"a","colour":"red"}`, `:1: json: unknown field "colour"`},
		{`{"user":"u","text":"a","id":1.5}`, `:1: field "id": want a string or an integer`},
		{`{"user":"u","text":"a","entities":"x"}`, `:1: field "entities": want []string`},
		{"{\"user\":\"u\",\"text\":\"a\",\"id\":\"x\"}\n{\"user\":\"u\",\"text\":\"b\",\"id\":\"x\"}", `:2: field "id": user "u" already has memory "x" (line 1)`},
		{`{"user":"u","text":"a","topic":"travel"}`, `:1: field "subtopic"`},
	} {
		bad := writeFile(t, "bad.jsonl", c.line+"\n")
		if _, err := ReadJSONL(bad); err == nil || !strings.Contains(err.Error(), bad+c.want) {
			t.Errorf("%s: got %v, want …%s", c.line, err, c.want)
		}
	}
}

func writeFile(t *testing.T, name, content string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Unix seconds become the instant they name, fractions included, through
// the whole RFC 3339 range; a time outside it is refused, not wrapped.
// Before, seconds went through int64 nanoseconds, which end in 2262: 1e10
// (the year 2286) came back as 1677-09-21, the int64 minimum (on amd64).
func TestReadJSONLUnixSecondsRange(t *testing.T) {
	path := writeFile(t, "m.jsonl", `{"user":"u","query":"a","time":-5}
{"user":"u","query":"b","time":1700000000.25}
{"user":"u","query":"c","time":10000000000}
{"user":"u","query":"d","time":253402300799}
{"user":"u","query":"e","time":-62135596800}
`)
	got, err := ReadJSONL(path)
	if err != nil {
		t.Fatal(err)
	}
	want := []time.Time{
		time.Date(1969, 12, 31, 23, 59, 55, 0, time.UTC),
		time.Date(2023, 11, 14, 22, 13, 20, 250_000_000, time.UTC),
		time.Date(2286, 11, 20, 17, 46, 40, 0, time.UTC),
		time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC),
		time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	for i, w := range want {
		if !got[i].Time.Equal(w) {
			t.Errorf("line %d: got %v, want %v", i+1, got[i].Time, w)
		}
	}
	for _, sec := range []string{"253402300800", "-62135596801", "1e300", "-1e300"} {
		bad := writeFile(t, "bad.jsonl", `{"user":"u","query":"a","time":`+sec+"}\n")
		if _, err := ReadJSONL(bad); err == nil || !strings.Contains(err.Error(), bad+`:1: field "time": `+sec+" Unix seconds: outside the years 0001–9999") {
			t.Errorf("time %s: got %v", sec, err)
		}
	}
}
