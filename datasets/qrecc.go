package datasets

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// readJSONArray reads QReCC's or TopiOCQA's original file: one JSON array of
// turn objects. Each record keeps its index and the line it starts on.
func readJSONArray(ctx context.Context, path, format string) ([]record, error) {
	f, err := openMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	raw = bytes.TrimPrefix(raw, []byte("\ufeff"))
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil {
		return nil, fmt.Errorf("%s:1: want a JSON array of turns: %w", path, err)
	}
	if d, ok := tok.(json.Delim); !ok || d != '[' {
		return nil, fmt.Errorf("%s:1: want a JSON array of turns, got %v", path, tok)
	}
	lc := lineCounter{raw: raw, line: 1}
	var recs []record
	for i := 0; dec.More(); i++ {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, fmt.Errorf("read %s: %w", path, err)
			}
		}
		line := lc.lineAt(skipSeparators(raw, int(dec.InputOffset())))
		var elem json.RawMessage
		if err := dec.Decode(&elem); err != nil {
			// The array itself is broken: nothing after this point can be trusted.
			return nil, fmt.Errorf("%s:%d: record %d: invalid JSON: %w", path, line, i, err)
		}
		var t Turn
		err := invalidUTF8Err(elem)
		if err == nil {
			t, err = decodeOriginal(elem, format)
		}
		if err == nil {
			err = validateTurn(t)
		}
		recs = append(recs, record{turn: t, err: err, line: line, index: i, pos: len(recs)})
	}
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%s: unterminated JSON array: %w", path, err)
	}
	return recs, nil
}

// lineCounter maps increasing byte offsets to 1-based line numbers.
type lineCounter struct {
	raw  []byte
	off  int
	line int
}

func (c *lineCounter) lineAt(off int) int {
	if off > len(c.raw) {
		off = len(c.raw)
	}
	if off > c.off {
		c.line += bytes.Count(c.raw[c.off:off], []byte("\n"))
		c.off = off
	}
	return c.line
}

// skipSeparators moves past the whitespace and comma before an array element.
func skipSeparators(raw []byte, off int) int {
	for off < len(raw) {
		switch raw[off] {
		case ' ', '\t', '\r', '\n', ',':
			off++
		default:
			return off
		}
	}
	return off
}

// originalKnown are the fields of the originals that map onto Turn fields;
// every other field goes to meta under its lower-cased name.
var originalKnown = map[string]bool{
	"Conversation_no": true, "Turn_no": true, "Context": true, "Question": true,
	"Rewrite": true, "Answer": true, "Gold_passage": true,
}

// decodeOriginal maps one QReCC or TopiOCQA record onto a Turn.
func decodeOriginal(raw []byte, format string) (Turn, error) {
	var t Turn
	m, err := decodeObject(raw)
	if err != nil {
		return t, err
	}
	if t.ConvID, err = idField(m, "Conversation_no", true); err != nil {
		return t, err
	}
	rawTurn, ok := m["Turn_no"]
	if !ok || isNull(rawTurn) {
		return t, fieldErrf("Turn_no", "is missing")
	}
	if err := json.Unmarshal(rawTurn, &t.Turn); err != nil {
		return t, fieldErrf("Turn_no", "want an integer, got %s", describeJSON(rawTurn))
	}
	if t.Turn < 1 {
		return t, fieldErrf("Turn_no", "must be ≥ 1, got %d", t.Turn)
	}
	if c, ok := m["Context"]; ok && !isNull(c) {
		var ctxs []string
		if err := json.Unmarshal(c, &ctxs); err != nil {
			return t, fieldErrf("Context", "want an array of strings, got %s", describeJSON(c))
		}
		// Context alternates question and answer, oldest first.
		for i, s := range ctxs {
			role := "user"
			if i%2 == 1 {
				role = "assistant"
			}
			t.History = append(t.History, Message{Role: role, Text: s})
		}
	}
	if _, ok := m["Question"]; !ok {
		return t, fieldErrf("Question", "is missing")
	}
	if t.Question, _, err = stringField(m, "Question"); err != nil {
		return t, err
	}
	if rw, _, err := stringField(m, "Rewrite"); err != nil {
		return t, err
	} else if rw != "" {
		t.Rewrite = &rw
	}
	if t.Answer, _, err = stringField(m, "Answer"); err != nil {
		return t, err
	}
	if gp, ok := m["Gold_passage"]; ok && !isNull(gp) {
		if format != FormatTopiOCQA {
			return t, fieldErrf("Gold_passage", "is a TopiOCQA field in a QReCC file")
		}
		gm, err := decodeObject(gp)
		if err != nil {
			return t, &fieldError{field: "Gold_passage", err: err}
		}
		var p PassageRef
		if p.ID, err = idField(gm, "id", true); err != nil {
			return t, nestField("Gold_passage", err)
		}
		if p.Title, _, err = stringField(gm, "title"); err != nil {
			return t, nestField("Gold_passage", err)
		}
		if p.Text, _, err = stringField(gm, "text"); err != nil {
			return t, nestField("Gold_passage", err)
		}
		t.Passages = []PassageRef{p}
	}
	for k, v := range m {
		if originalKnown[k] || isNull(v) {
			continue
		}
		if t.Meta == nil {
			t.Meta = map[string]any{}
		}
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var val any
		if err := dec.Decode(&val); err != nil {
			return t, fieldErrf(k, "invalid JSON: %v", err)
		}
		t.Meta[strings.ToLower(k)] = val
	}
	if t.Meta == nil {
		t.Meta = map[string]any{}
	}
	if _, ok := t.Meta["dataset"]; !ok {
		t.Meta["dataset"] = map[string]string{FormatQReCC: "QReCC", FormatTopiOCQA: "TopiOCQA"}[format]
	}
	return t, nil
}
