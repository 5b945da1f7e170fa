package datasets

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"unicode/utf8"
)

// Default bounds on input sizes (data.max_field_bytes, data.max_record_bytes).
// A 50 MB question made an evaluation hold 2.1 GB; real fields are far below
// a quarter MiB and real records (a turn with its history and passages) below
// a few hundred KiB.
const (
	DefaultMaxFieldBytes  = 256 << 10
	DefaultMaxRecordBytes = 16 << 20
)

// ErrTooLong matches (errors.Is) a record or field over its size bound.
var ErrTooLong = errors.New("input too long")

// tooLongError says what was too long; it matches ErrTooLong.
type tooLongError struct{ msg string }

func (e *tooLongError) Error() string        { return e.msg }
func (e *tooLongError) Is(target error) bool { return target == ErrTooLong }

// checkTurnText refuses invalid UTF-8 and strings over maxField bytes in
// every text field of a decoded turn, naming the field. encoding/json has
// already replaced invalid bytes by U+FFFD in JSON input (see
// InvalidUTF8Field for that); Parquet strings arrive as they were written.
func checkTurnText(t Turn, maxField int) error {
	check := func(field, s string) error {
		if len(s) > maxField {
			return &fieldError{field: field, err: &tooLongError{fmt.Sprintf("is %d bytes, more than the %d allowed (data.max_field_bytes)", len(s), maxField)}}
		}
		if !utf8.ValidString(s) {
			return fieldErrf(field, "invalid UTF-8")
		}
		return nil
	}
	fields := []struct{ name, v string }{{"conv_id", t.ConvID}, {"turn", t.TurnLabel}, {"question", t.Question}, {"answer", t.Answer}, {"user", t.User}}
	if t.Rewrite != nil {
		fields = append(fields, struct{ name, v string }{"rewrite", *t.Rewrite})
	}
	for _, f := range fields {
		if err := check(f.name, f.v); err != nil {
			return err
		}
	}
	for i, m := range t.History {
		idx := "history[" + strconv.Itoa(i) + "]"
		if err := check(idx+".role", m.Role); err != nil {
			return err
		}
		if err := check(idx+".text", m.Text); err != nil {
			return err
		}
	}
	for i, p := range t.Passages {
		idx := "passages[" + strconv.Itoa(i) + "]"
		for _, f := range []struct{ name, v string }{{"id", p.ID}, {"title", p.Title}, {"text", p.Text}, {"source", p.Source}} {
			if err := check(idx+"."+f.name, f.v); err != nil {
				return err
			}
		}
		for j, s := range p.AnswerSnippets {
			if err := check(idx+".answer_snippets["+strconv.Itoa(j)+"]", s); err != nil {
				return err
			}
		}
	}
	return checkMetaText("meta", t.Meta, maxField, check)
}

func checkMetaText(path string, v any, maxField int, check func(field, s string) error) error {
	switch x := v.(type) {
	case string:
		return check(path, x)
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := check(path, k); err != nil {
				return err
			}
			if err := checkMetaText(path+"."+k, x[k], maxField, check); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := checkMetaText(path+"["+strconv.Itoa(i)+"]", e, maxField, check); err != nil {
				return err
			}
		}
	}
	return nil
}

// InvalidUTF8Field returns the path of the first value in a JSON document
// whose bytes are not valid UTF-8 ("passages[1].text"; "" when it is the
// document itself or a key), and bad false when raw is valid. encoding/json
// would silently replace such bytes by U+FFFD.
func InvalidUTF8Field(raw []byte) (path string, bad bool) {
	if utf8.Valid(raw) {
		return "", false
	}
	return firstInvalid(bytes.TrimSpace(raw), ""), true
}

func firstInvalid(raw []byte, path string) string {
	if len(raw) == 0 {
		return path
	}
	join := func(k string) string {
		if path == "" {
			return k
		}
		return path + "." + k
	}
	switch raw[0] {
	case '{':
		var m map[string]json.RawMessage
		if json.Unmarshal(raw, &m) != nil {
			return path
		}
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if !utf8.Valid(m[k]) {
				return firstInvalid(bytes.TrimSpace(m[k]), join(k))
			}
		}
	case '[':
		var items []json.RawMessage
		if json.Unmarshal(raw, &items) != nil {
			return path
		}
		for i, it := range items {
			if !utf8.Valid(it) {
				return firstInvalid(bytes.TrimSpace(it), path+"["+strconv.Itoa(i)+"]")
			}
		}
	}
	return path
}

// invalidUTF8Err is the record error for invalid UTF-8 found in raw JSON.
func invalidUTF8Err(raw []byte) error {
	path, bad := InvalidUTF8Field(raw)
	switch {
	case !bad:
		return nil
	case path == "":
		return errors.New("invalid UTF-8")
	}
	return fieldErrf(path, "invalid UTF-8")
}

// ReadBoundedLine reads one line (with its '\n') of at most max bytes. A
// longer line is consumed to its end and reported as tooLong with its
// length n, without holding more than max bytes of it.
func ReadBoundedLine(br *bufio.Reader, max int) (line []byte, n int, tooLong bool, err error) {
	for {
		chunk, rerr := br.ReadSlice('\n')
		n += len(chunk)
		if !tooLong {
			if len(line)+len(chunk) > max {
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(rerr, bufio.ErrBufferFull) {
			continue
		}
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, n, tooLong, rerr
		}
		return line, n, tooLong, rerr
	}
}

// tooLongRecord is the error of a record over maxRecord bytes.
func tooLongRecord(n, maxRecord int) error {
	return &tooLongError{fmt.Sprintf("record is %d bytes, more than the %d allowed (data.max_record_bytes)", n, maxRecord)}
}
