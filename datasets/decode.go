package datasets

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
)

// Field-by-field decoding of the normalized schema, so every problem names
// the field it is in. json.Unmarshal alone would report "cannot unmarshal
// number into Go struct field" without saying which passage.

var turnFields = map[string]bool{
	"conv_id": true, "turn": true, "history": true, "question": true, "rewrite": true,
	"answer": true, "answers": true, "passages": true, "meta": true, "user": true,
}

var passageFields = map[string]bool{
	"id": true, "title": true, "text": true, "relevance": true, "answer_snippets": true, "source": true,
}

// decodeObject splits a JSON object into its raw fields.
func decodeObject(raw []byte) (map[string]json.RawMessage, error) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("want a JSON object, got %s", describeJSON(raw))
	}
	var m map[string]json.RawMessage
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	return m, nil
}

// decodeNormalized validates and decodes one record of the normalized schema,
// after renaming its fields by cols (normalized name → the source's name).
func decodeNormalized(raw []byte, cols map[string]string) (Turn, error) {
	m, err := decodeObject(raw)
	if err != nil {
		return Turn{}, err
	}
	if err := renameFields(m, cols); err != nil {
		return Turn{}, err
	}
	if err := rejectUnknown(m, turnFields, "put source-specific fields under meta"); err != nil {
		return Turn{}, err
	}
	var t Turn
	if t.ConvID, err = idField(m, "conv_id", true); err != nil {
		return t, err
	}
	rawTurn, ok := m["turn"]
	if !ok {
		return t, fieldErrf("turn", "is missing")
	}
	n, label, err := parseTurnNumber(rawTurn)
	if err != nil {
		return t, &fieldError{field: "turn", err: err}
	}
	if label == "" && n < 1 {
		return t, fieldErrf("turn", "must be ≥ 1, got %d", n)
	}
	if t.History, err = decodeHistory(m["history"]); err != nil {
		return t, nestField("history", err)
	}
	t.Turn, t.TurnLabel = n, label
	if label != "" {
		t.Turn = countUser(t.History) + 1
	}
	if _, ok := m["question"]; !ok {
		return t, fieldErrf("question", "is missing (use null when the source has none)")
	}
	if t.Question, _, err = stringField(m, "question"); err != nil {
		return t, err
	}
	rw, present, err := stringField(m, "rewrite")
	if err != nil {
		return t, err
	}
	if present {
		t.Rewrite = &rw
	}
	if t.Answer, _, err = stringField(m, "answer"); err != nil {
		return t, err
	}
	if t.Answers, err = stringList(m["answers"]); err != nil {
		return t, nestField("answers", err)
	}
	if t.Answer == "" && len(t.Answers) > 0 {
		t.Answer = t.Answers[0]
	}
	if t.Passages, err = decodePassages(m["passages"]); err != nil {
		return t, nestField("passages", err)
	}
	if t.Meta, err = decodeMeta(m["meta"]); err != nil {
		return t, nestField("meta", err)
	}
	if t.User, _, err = stringField(m, "user"); err != nil {
		return t, err
	}
	if t.Question == "" && !t.HasRewrite() {
		return t, fieldErrf("question", "is empty and there is no rewrite either")
	}
	return t, nil
}

// renameFields applies a data.columns mapping to one record: the source's
// field cols[k] becomes k. A record that has both is ambiguous.
func renameFields(m map[string]json.RawMessage, cols map[string]string) error {
	for norm, src := range cols {
		v, ok := m[src]
		if !ok || src == norm {
			continue
		}
		if _, both := m[norm]; both {
			return fieldErrf(src, "data.columns maps it to %s, but the record also has a field %s", norm, norm)
		}
		m[norm] = v
		delete(m, src)
	}
	return nil
}

// stringList reads an optional array of strings (null, absent or [] → nil).
func stringList(raw json.RawMessage) ([]string, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want an array of strings, got %s", describeJSON(raw))
	}
	var out []string
	for i, it := range items {
		var s string
		if err := json.Unmarshal(it, &s); err != nil {
			return nil, fieldErrf("["+strconv.Itoa(i)+"]", "want a string, got %s", describeJSON(it))
		}
		out = append(out, s)
	}
	return out, nil
}

func rejectUnknown(m map[string]json.RawMessage, known map[string]bool, hint string) error {
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) == 0 {
		return nil
	}
	sort.Strings(unknown)
	return fieldErrf(unknown[0], "unknown field (%s)", hint)
}

func isNull(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) == 0 || string(raw) == "null"
}

// stringField reads an optional string; null or absent gives ("", false).
func stringField(m map[string]json.RawMessage, key string) (string, bool, error) {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		return "", false, nil
	}
	var s string
	if err := json.Unmarshal(raw, &s); err != nil {
		return "", false, fieldErrf(key, "want a string, got %s", describeJSON(raw))
	}
	return s, true, nil
}

// idField reads an identifier that may be a string or an integer (source
// datasets number their conversations).
func idField(m map[string]json.RawMessage, key string, required bool) (string, error) {
	raw, ok := m[key]
	if !ok || isNull(raw) {
		if required {
			return "", fieldErrf(key, "is missing")
		}
		return "", nil
	}
	raw = bytes.TrimSpace(raw)
	var s string
	switch {
	case raw[0] == '"':
		if err := json.Unmarshal(raw, &s); err != nil {
			return "", fieldErrf(key, "invalid string: %v", err)
		}
	default:
		if _, err := strconv.ParseInt(string(raw), 10, 64); err != nil {
			return "", fieldErrf(key, "want a string or an integer, got %s", describeJSON(raw))
		}
		s = string(raw)
	}
	if s == "" && required {
		return "", fieldErrf(key, "is empty")
	}
	return s, nil
}

func decodeHistory(raw json.RawMessage) ([]Message, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want an array of {role, text} (or {role, content}), got %s", describeJSON(raw))
	}
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]Message, 0, len(items))
	for i, it := range items {
		idx := "[" + strconv.Itoa(i) + "]"
		m, err := decodeObject(it)
		if err != nil {
			return nil, &fieldError{field: idx, err: err}
		}
		if err := rejectUnknown(m, map[string]bool{"role": true, "text": true, "content": true}, "want role and text (or content)"); err != nil {
			return nil, nestField(idx, err)
		}
		if _, hasText := m["text"]; hasText {
			if _, hasContent := m["content"]; hasContent {
				return nil, fieldErrf(idx+".content", "the message has text too: give one of text and content")
			}
		}
		role, _, err := stringField(m, "role")
		if err != nil {
			return nil, nestField(idx, err)
		}
		if role != "user" && role != "assistant" {
			return nil, fieldErrf(idx+".role", "want \"user\" or \"assistant\", got %q", role)
		}
		key := "text"
		if _, ok := m["content"]; ok {
			key = "content" // the Hugging Face / OpenAI chat convention
		}
		text, _, err := stringField(m, key)
		if err != nil {
			return nil, nestField(idx, err)
		}
		out = append(out, Message{Role: role, Text: text})
	}
	return out, nil
}

func decodePassages(raw json.RawMessage) ([]PassageRef, error) {
	if isNull(raw) {
		return nil, nil
	}
	var items []json.RawMessage
	if err := json.Unmarshal(raw, &items); err != nil {
		return nil, fmt.Errorf("want an array of passages, got %s", describeJSON(raw))
	}
	if len(items) == 0 {
		return nil, nil
	}
	out := make([]PassageRef, 0, len(items))
	for i, it := range items {
		idx := "[" + strconv.Itoa(i) + "]"
		p, err := decodePassage(it)
		if err != nil {
			return nil, nestField(idx, err)
		}
		out = append(out, p)
	}
	return out, nil
}

func decodePassage(raw json.RawMessage) (PassageRef, error) {
	var p PassageRef
	m, err := decodeObject(raw)
	if err != nil {
		return p, err
	}
	if err := rejectUnknown(m, passageFields, "known: id, title, text, relevance, answer_snippets, source"); err != nil {
		return p, err
	}
	if p.ID, err = idField(m, "id", true); err != nil {
		return p, err
	}
	if p.Title, _, err = stringField(m, "title"); err != nil {
		return p, err
	}
	if p.Text, _, err = stringField(m, "text"); err != nil {
		return p, err
	}
	if p.Source, _, err = stringField(m, "source"); err != nil {
		return p, err
	}
	if r, ok := m["relevance"]; ok && !isNull(r) {
		var v int
		if err := json.Unmarshal(r, &v); err != nil {
			return p, fieldErrf("relevance", "want an integer, got %s", describeJSON(r))
		}
		if v < 0 {
			return p, fieldErrf("relevance", "must be ≥ 0, got %d", v)
		}
		p.Relevance = &v
	}
	if s, ok := m["answer_snippets"]; ok && !isNull(s) {
		if err := p.setSnippets(s); err != nil {
			return p, &fieldError{field: "answer_snippets", err: err}
		}
	}
	return p, nil
}

func decodeMeta(raw json.RawMessage) (map[string]any, error) {
	if isNull(raw) {
		return nil, nil
	}
	if b := bytes.TrimSpace(raw); b[0] != '{' {
		return nil, fmt.Errorf("want an object, got %s", describeJSON(raw))
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // keep numbers exact so a round trip is byte-identical
	var meta map[string]any
	if err := dec.Decode(&meta); err != nil {
		return nil, fmt.Errorf("invalid object: %w", err)
	}
	return meta, nil
}

// describeJSON names the kind of a JSON value for error messages.
func describeJSON(raw []byte) string {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return "nothing"
	}
	kind := "a number"
	switch raw[0] {
	case '{':
		kind = "an object"
	case '[':
		kind = "an array"
	case '"':
		kind = "a string"
	case 't', 'f':
		kind = "a boolean"
	case 'n':
		return "null"
	}
	return kind + " " + truncate(string(raw), 40)
}

// validateTurn applies the schema's rules to a Turn decoded from a format
// that does not go through decodeNormalized (Parquet, QReCC, TopiOCQA).
func validateTurn(t Turn) error {
	if t.ConvID == "" {
		return fieldErrf("conv_id", "is empty")
	}
	if t.Turn < 1 {
		return fieldErrf("turn", "must be ≥ 1, got %d", t.Turn)
	}
	for i, m := range t.History {
		if m.Role != "user" && m.Role != "assistant" {
			return fieldErrf("history["+strconv.Itoa(i)+"].role", "want \"user\" or \"assistant\", got %q", m.Role)
		}
	}
	for i, p := range t.Passages {
		idx := "passages[" + strconv.Itoa(i) + "]"
		if p.ID == "" {
			return fieldErrf(idx+".id", "is empty")
		}
		if p.Relevance != nil && *p.Relevance < 0 {
			return fieldErrf(idx+".relevance", "must be ≥ 0, got %d", *p.Relevance)
		}
	}
	if t.Question == "" && !t.HasRewrite() {
		return fieldErrf("question", "is empty and there is no rewrite either")
	}
	return nil
}
