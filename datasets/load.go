package datasets

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// Input formats accepted by Load.
const (
	FormatJSONL    = "jsonl"    // the normalized schema, one turn per line
	FormatParquet  = "parquet"  // the normalized schema as Parquet columns
	FormatQReCC    = "qrecc"    // QReCC's original JSON array
	FormatTopiOCQA = "topiocqa" // TopiOCQA's original JSON array
)

// maxSkippedErrors bounds LoadStats.SkippedErrors; Skipped still counts all.
const maxSkippedErrors = 1000

// LoadOptions control Load.
type LoadOptions struct {
	// Format is jsonl, parquet, qrecc or topiocqa; "" picks by extension
	// (.jsonl, .ndjson, .parquet; .gz is decompressed) and, for .json and
	// anything else, by sniffing the content.
	Format string
	// SkipBad skips invalid records (counted in LoadStats) instead of failing.
	SkipBad bool
	// UserField fills Turn.User: "conv_id" (default when ""), "topic"
	// (meta.topic) or "meta.<key>". A record without the field is invalid.
	UserField string
	// MemoryField ("meta.<key>") holds the user's statements, a map id →
	// text or a list; MemoryLabelsField ("meta.<key>") the ids of the
	// memories judged relevant to the turn. They fill Turn.Facts and
	// Turn.MemoryLabels; a bad shape or a label naming no fact is invalid.
	MemoryField       string
	MemoryLabelsField string
	// Columns renames the fields (JSONL) or columns (Parquet) of a foreign
	// export: normalized name → the source's name, e.g. question: query.
	// Errors name the source's field.
	Columns map[string]string
	// MaxFieldBytes bounds every text field of a record, MaxRecordBytes one
	// JSONL line (0: DefaultMaxFieldBytes, DefaultMaxRecordBytes). A record
	// over either is invalid, like one with invalid UTF-8.
	MaxFieldBytes, MaxRecordBytes int
	// RequireQuestion makes a record without a question (null, absent
	// under data.columns, or blank) invalid even when it has a rewrite:
	// GRPO prompts and evaluated turns render the question as asked, and
	// such a turn used to load and then stop a run at the step that drew
	// it, naming no file or line (item 6 of issue 33). himes prep, which
	// can use a rewrite alone, leaves it off.
	RequireQuestion bool
}

func (o LoadOptions) limits() (field, record int) {
	field, record = o.MaxFieldBytes, o.MaxRecordBytes
	if field <= 0 {
		field = DefaultMaxFieldBytes
	}
	if record <= 0 {
		record = DefaultMaxRecordBytes
	}
	return field, record
}

// LoadStats counts what Load read.
type LoadStats struct {
	Records int // turns returned
	Skipped int // invalid records skipped (SkipBad)
	// SkippedErrors are the reasons, as *RecordError, at most the first 1000.
	SkippedErrors []error
}

func (s *LoadStats) skip(err error) {
	s.Skipped++
	if len(s.SkippedErrors) < maxSkippedErrors {
		s.SkippedErrors = append(s.SkippedErrors, err)
	}
}

// LoadContext reads the turns of one file in any supported format, validates
// every record (errors are *RecordError naming file, line and field), fills
// Turn.User from opts.UserField, and rejects a (conv_id, turn) seen twice.
func LoadContext(ctx context.Context, path string, opts LoadOptions) ([]Turn, LoadStats, error) {
	var stats LoadStats
	userOf, err := userKeyFunc(opts.UserField, "data.user_field")
	if err != nil {
		return nil, stats, err
	}
	for _, f := range []string{opts.MemoryField, opts.MemoryLabelsField} {
		if _, err := memoryFieldKey(f); f != "" && err != nil {
			return nil, stats, fmt.Errorf("load %s: memory field: %w", path, err)
		}
	}
	format := opts.Format
	if format == "" {
		if format, err = detectFormat(path); err != nil {
			return nil, stats, err
		}
	}
	if err := checkColumns(opts.Columns); err != nil {
		return nil, stats, fmt.Errorf("load %s: %w", path, err)
	}
	maxField, maxRecord := opts.limits()
	var recs []record
	switch format {
	case FormatJSONL:
		recs, err = readJSONL(ctx, path, opts.Columns, maxRecord)
	case FormatQReCC, FormatTopiOCQA:
		if len(opts.Columns) > 0 {
			return nil, stats, fmt.Errorf("load %s: data.columns renames JSONL and Parquet fields; the %s format has its own", path, format)
		}
		recs, err = readJSONArray(ctx, path, format)
	case FormatParquet:
		recs, err = readParquetRecords(ctx, path, opts.Columns)
	default:
		return nil, stats, fmt.Errorf("load %s: unknown format %q (want jsonl, parquet, qrecc or topiocqa)", path, format)
	}
	if err != nil {
		return nil, stats, err
	}
	turns := make([]Turn, 0, len(recs))
	seen := make(map[string]int, len(recs))
	for i, r := range recs {
		if i%1024 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, stats, fmt.Errorf("load %s: %w", path, err)
			}
		}
		if r.err == nil {
			r.err = checkTurnText(r.turn, maxField)
		}
		if r.err == nil && opts.RequireQuestion && strings.TrimSpace(r.turn.Question) == "" {
			r.err = fieldErrf("question", "is null or blank: a training prompt or evaluated turn needs the question as asked (a rewrite alone serves only himes prep)")
		}
		if r.err == nil {
			r.turn.User, r.err = userOf(r.turn)
		}
		if r.err == nil {
			r.err = attachMemoryFields(&r.turn, opts.MemoryField, opts.MemoryLabelsField)
		}
		if r.err == nil {
			if first, dup := seen[r.turn.ID()]; dup {
				r.err = fieldErrf("turn", "duplicate turn %s (first at %s)%s", r.turn.ID(), recs[first].where(), labelNote(r.turn))
			}
		}
		if r.err != nil {
			re := recordErr(path, r.line, r.index, r.err)
			re.Field = sourceField(re.Field, opts.Columns)
			if !opts.SkipBad {
				return nil, stats, re
			}
			stats.skip(re)
			continue
		}
		seen[r.turn.ID()] = r.pos
		turns = append(turns, r.turn)
	}
	stats.Records = len(turns)
	return turns, stats, nil
}

// record is one decoded input record, or the reason it is invalid.
type record struct {
	turn  Turn
	err   error
	line  int // 1-based, 0 unknown
	index int // record index in an array or table, -1 for JSONL
	pos   int // position in the record slice
}

func (r record) where() string {
	if r.line > 0 {
		return fmt.Sprintf("line %d", r.line)
	}
	return fmt.Sprintf("record %d", r.index+1) // 1-based, as RecordError prints it
}

func detectFormat(path string) (string, error) {
	name := strings.ToLower(strings.TrimSuffix(path, ".gz"))
	switch filepath.Ext(name) {
	case ".jsonl", ".ndjson":
		return FormatJSONL, nil
	case ".parquet", ".pq":
		return FormatParquet, nil
	}
	f, err := openMaybeGzip(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	head := make([]byte, 64<<10)
	n, err := io.ReadFull(f, head)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return "", fmt.Errorf("read %s: %w", path, err)
	}
	head = bytes.TrimLeft(head[:n], " \t\r\n\ufeff")
	switch {
	case bytes.HasPrefix(head, []byte("PAR1")):
		return FormatParquet, nil
	case bytes.HasPrefix(head, []byte("{")):
		return FormatJSONL, nil
	case bytes.HasPrefix(head, []byte("[")):
		// Both originals are arrays of objects; TopiOCQA's carry Gold_passage.
		if bytes.Contains(head, []byte(`"Gold_passage"`)) {
			return FormatTopiOCQA, nil
		}
		if bytes.Contains(head, []byte(`"Conversation_no"`)) {
			return FormatQReCC, nil
		}
		return "", fmt.Errorf("%s: a JSON array but neither QReCC nor TopiOCQA (no Conversation_no field); set the format explicitly", path)
	}
	return "", fmt.Errorf("%s: cannot tell the format (not JSONL, a JSON array or Parquet); set it explicitly", path)
}

type gzipFile struct {
	*gzip.Reader
	f *os.File
}

func (g gzipFile) Close() error {
	err := g.Reader.Close()
	if cerr := g.f.Close(); err == nil {
		err = cerr
	}
	return err
}

// openMaybeGzip opens path, decompressing it when it ends in .gz.
func openMaybeGzip(path string) (io.ReadCloser, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open dataset: %w", err)
	}
	if !strings.HasSuffix(strings.ToLower(path), ".gz") {
		return f, nil
	}
	zr, err := gzip.NewReader(f)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open dataset %s: %w", path, err)
	}
	return gzipFile{zr, f}, nil
}

// readJSONL decodes one record per non-blank line; a bad line (invalid
// JSON, invalid UTF-8, longer than maxRecord) is a record with an error, so
// SkipBad can continue past it.
func readJSONL(ctx context.Context, path string, cols map[string]string, maxRecord int) ([]record, error) {
	f, err := openMaybeGzip(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(f, 1<<20)
	var recs []record
	for lineNo := 1; ; lineNo++ {
		line, n, tooLong, rerr := ReadBoundedLine(br, maxRecord)
		if rerr != nil && !errors.Is(rerr, io.EOF) {
			return nil, fmt.Errorf("read %s:%d: %w", path, lineNo, rerr)
		}
		if tooLong {
			recs = append(recs, record{err: tooLongRecord(n, maxRecord), line: lineNo, index: -1, pos: len(recs)})
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\ufeff"))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			if lineNo%1024 == 0 {
				if err := ctx.Err(); err != nil {
					return nil, fmt.Errorf("read %s: %w", path, err)
				}
			}
			var t Turn
			err := invalidUTF8Err(line)
			if err == nil {
				t, err = decodeNormalized(line, cols)
			}
			recs = append(recs, record{turn: t, err: err, line: lineNo, index: -1, pos: len(recs)})
		}
		if errors.Is(rerr, io.EOF) {
			return recs, nil
		}
	}
}

// checkColumns validates a data.columns mapping: normalized names, each
// source name used once.
func checkColumns(cols map[string]string) error {
	src := map[string]string{}
	for norm, from := range cols {
		switch {
		case !turnFields[norm] && norm != "turn_label":
			return fmt.Errorf("data.columns: %q is not a normalized field (conv_id, turn, history, question, rewrite, answer, answers, passages, meta, user)", norm)
		case from == "":
			return fmt.Errorf("data.columns.%s: the source column name is empty", norm)
		case src[from] != "":
			return fmt.Errorf("data.columns: %s and %s both come from %q", src[from], norm, from)
		}
		src[from] = norm
	}
	return nil
}

// sourceField renames the first segment of an error's field path back to
// the source's name, so the message points at the file's own field.
func sourceField(field string, cols map[string]string) string {
	end := strings.IndexAny(field, ".[")
	if end < 0 {
		end = len(field)
	}
	if from, ok := cols[field[:end]]; ok && from != field[:end] {
		return from + field[end:]
	}
	return field
}

// userKeyFunc returns the function that computes a turn's key from field
// (conv_id, topic or meta.<key>); setting names the config key that chose
// field, so a turn without it is reported against that key.
func userKeyFunc(field, setting string) (func(Turn) (string, error), error) {
	switch {
	case field == "" || field == "conv_id":
		return func(t Turn) (string, error) { return t.ConvID, nil }, nil
	case field == "topic" || strings.HasPrefix(field, "meta."):
		key := strings.TrimPrefix(field, "meta.")
		if key == "" {
			return nil, fmt.Errorf("user field %q: want meta.<key>", field)
		}
		return func(t Turn) (string, error) {
			v, ok := t.Meta[key]
			if !ok || v == nil {
				return "", fieldErrf("meta."+key, "is missing (%s is %s)", setting, field)
			}
			return metaString(v), nil
		}, nil
	}
	return nil, fmt.Errorf("user field %q: want conv_id, topic or meta.<key>", field)
}

// metaString renders a meta value as a key: strings as is, others as JSON.
func metaString(v any) string {
	switch x := v.(type) {
	case string:
		return x
	case json.Number:
		return x.String()
	}
	b, err := marshalNoEscape(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// LoadFiles loads several files with the same options and concatenates them
// in order. A turn id (conv_id#turn) found in two files is an error: the
// outputs would be ambiguous, and splits would join unrelated conversations;
// so is a file given twice.
func LoadFiles(ctx context.Context, paths []string, opts LoadOptions) ([]Turn, LoadStats, error) {
	var all []Turn
	var total LoadStats
	from := map[string]string{}
	given := map[string]bool{}
	for _, p := range paths {
		// Said as such: the duplicate-turn error below would name the
		// file as "in both" itself.
		key := p
		if abs, err := filepath.Abs(p); err == nil {
			key = abs
		}
		if given[key] {
			return nil, total, fmt.Errorf("%s given twice", p)
		}
		given[key] = true
		turns, st, err := LoadContext(ctx, p, opts)
		if err != nil {
			return nil, total, err
		}
		for _, t := range turns {
			if prev, ok := from[t.ID()]; ok {
				return nil, total, fmt.Errorf("turn %s is in both %s and %s: conversation ids must be unique across input files", t.ID(), prev, p)
			}
		}
		for _, t := range turns {
			from[t.ID()] = p
		}
		all = append(all, turns...)
		total.Records += st.Records
		total.Skipped += st.Skipped
		for _, e := range st.SkippedErrors {
			if len(total.SkippedErrors) < maxSkippedErrors {
				total.SkippedErrors = append(total.SkippedErrors, e)
			}
		}
	}
	return all, total, nil
}

// labelNote explains a labelled turn's number in a duplicate-turn error:
// the label itself is not the number, so "turn": "two" after no history
// collides with turn 1, which the message alone would not show.
func labelNote(t Turn) string {
	if t.TurnLabel == "" {
		return ""
	}
	return fmt.Sprintf(`; its "turn" is the label %q, so its number is counted from its history: %d earlier user turns`, t.TurnLabel, t.Turn-1)
}
