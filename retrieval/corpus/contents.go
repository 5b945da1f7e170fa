package corpus

import (
	"encoding/json"
	"fmt"
	"strings"
)

// DocID is a document id that may arrive as a JSON string or a number
// (some corpora, and the retrieval services serving them, number their
// documents); it is kept as text.
type DocID string

// UnmarshalJSON accepts a string or a number.
func (d *DocID) UnmarshalJSON(b []byte) error {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return err
		}
		*d = DocID(s)
		return nil
	}
	var n json.Number
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("document id: want a string or a number, got %s", b)
	}
	*d = DocID(n.String())
	return nil
}

// ParseContents splits a Pyserini/Search-R1 "contents" string into title and
// text. Search-R1's corpora (wiki-18) store `"Title"\ntext`; a first line in
// double quotes followed by more lines is taken as the title, anything else
// is all text.
func ParseContents(contents string) (title, text string) {
	first, rest, ok := strings.Cut(contents, "\n")
	if ok && len(first) >= 2 && first[0] == '"' && first[len(first)-1] == '"' && strings.TrimSpace(rest) != "" {
		return first[1 : len(first)-1], rest
	}
	return "", contents
}

// FormatContents is the inverse of ParseContents for chunks served over the
// protocol: `"Title"\ntext`, or the text alone when there is no title.
func FormatContents(c Chunk) string {
	if c.Title == "" {
		return c.Text
	}
	return `"` + c.Title + `"` + "\n" + c.Text
}
