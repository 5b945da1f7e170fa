package datasets

import (
	"errors"
	"fmt"
	"strings"
)

// RecordError is a problem with one record of an input file. It names the
// file, the line (1-based; 0 when unknown), the record (0-based index in a
// JSON array or Parquet file; -1 for JSONL, where the line says it) and the
// field (dotted path such as "passages[2].id"; "" for the whole record).
// The message numbers records from 1, as lines are (record 1 is the first
// row of a Parquet file), so the numbers a user reads count the same way.
type RecordError struct {
	File   string
	Line   int
	Record int
	Field  string
	Err    error
}

func (e *RecordError) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
	}
	if e.Record >= 0 {
		fmt.Fprintf(&b, ": record %d", e.Record+1)
	}
	if e.Field != "" {
		fmt.Fprintf(&b, ": field %q", e.Field)
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *RecordError) Unwrap() error { return e.Err }

// fieldError is a validation failure inside one record, before the file and
// line are known.
type fieldError struct {
	field string
	err   error
}

func (e *fieldError) Error() string { return e.field + ": " + e.err.Error() }
func (e *fieldError) Unwrap() error { return e.err }

func fieldErrf(field, format string, args ...any) error {
	return &fieldError{field: field, err: fmt.Errorf(format, args...)}
}

// nestField prefixes a field error's path ("passages[2]" + "id").
func nestField(prefix string, err error) error {
	var fe *fieldError
	if errors.As(err, &fe) {
		sep := "."
		if strings.HasPrefix(fe.field, "[") {
			sep = ""
		}
		return &fieldError{field: prefix + sep + fe.field, err: fe.err}
	}
	return &fieldError{field: prefix, err: err}
}

// recordErr places a record-level error at file, line and record.
func recordErr(file string, line, record int, err error) *RecordError {
	re := &RecordError{File: file, Line: line, Record: record, Err: err}
	var fe *fieldError
	if errors.As(err, &fe) {
		re.Field, re.Err = fe.field, fe.err
	}
	return re
}
