package corpus

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Item 10 of issue 27: the knowledge base was lax where the datasets are
// strict: a huge passage loaded, unknown fields were dropped. Both are
// errors naming file, line and field now, and the limits can be raised.
func TestKBLimitsAndUnknownFields(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ok := `{"id":"a","title":"t","text":"first passage","source":"demo"}` + "\n"
	big := `{"id":"b","text":"` + strings.Repeat("w ", 600) + `"}` + "\n"
	cases := []struct {
		name, content string
		lim           Limits
		want          []string // substrings of the error; nil: loads
	}{
		{"known fields", ok + `{"id":"c","contents":"x","meta":{"k":1}}` + "\n", Limits{}, nil},
		{"unknown field", ok + `{"id":"c","txet":"x","text":"y"}` + "\n", Limits{}, []string{"unknown.jsonl:2", `"txet"`, "meta"}},
		{"field over the limit", ok + big, Limits{MaxFieldBytes: 1000}, []string{"field-over-the-limit.jsonl:2", `"text"`, "1200 bytes, at most 1000", "retrieval.kb_max_field_bytes"}},
		{"record over the limit", ok + big, Limits{MaxFieldBytes: 1000, MaxRecordBytes: 1100}, []string{":2", "at most 1100", "retrieval.kb_max_record_bytes"}},
		{"raised", ok + big, Limits{MaxFieldBytes: 2000}, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := write(strings.ReplaceAll(c.name, " ", "-")+".jsonl", c.content)
			if c.name == "unknown field" {
				p = write("unknown.jsonl", c.content)
			}
			_, err := LoadLimited(context.Background(), p, c.lim)
			if c.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatalf("loaded; want an error with %q", c.want)
			}
			for _, w := range c.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q lacks %q", err, w)
				}
			}
			// The streaming reader of an on-disk build checks the same.
			src, err := OpenSource(p, dir)
			if err != nil {
				t.Fatal(err)
			}
			defer src.Close()
			src.SetLimits(c.lim)
			if _, err := src.Scan(context.Background(), 0, 0); err == nil || !strings.Contains(err.Error(), c.want[len(c.want)-1]) {
				t.Errorf("streamed: got %v, want an error with %q", err, c.want[len(c.want)-1])
			}
		})
	}
	// The default field limit refuses a 2 MiB passage.
	p := write("huge.jsonl", `{"id":"h","text":"`+strings.Repeat("x", 2<<20)+`"}`+"\n")
	if _, err := Load(context.Background(), p); err == nil || !strings.Contains(err.Error(), "at most 1048576") {
		t.Fatalf("2 MiB passage: %v", err)
	}
}
