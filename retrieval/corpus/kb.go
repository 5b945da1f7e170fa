// Package corpus is the knowledge base: {id, title, text} passages read
// from JSONL or Parquet, or a Pyserini/Anserini {id, contents} collection
// (bad records are errors naming file and line), whole (Load) or streamed
// for a build that never holds them (Source); ChunkPassages cuts them into
// the overlapping word windows every index retrieves ("<passage id>#<i>").
// Zipf corpora are synthetic knowledge bases for benchmarks.
package corpus

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow"
	"github.com/apache/arrow-go/v18/arrow/array"

	"github.com/himes-rl/himes/internal/parquetfile"
)

// Chunk is a retrievable unit: a word window of a knowledge-base passage.
type Chunk struct {
	ID        string `json:"id"`         // derived from the passage id, e.g. "MARCO_1#0"
	PassageID string `json:"passage_id"` // the knowledge-base passage it came from
	Title     string `json:"title,omitempty"`
	Text      string `json:"text"`
}

// Ranked is a chunk with the score that placed it.
type Ranked struct {
	Chunk
	Score float64 `json:"score"`
}

// Passage is one knowledge-base record.
type Passage struct {
	ID    string `json:"id"`
	Title string `json:"title"`
	Text  string `json:"text"`
}

// KB is a loaded knowledge base with the fingerprint of the file it came from.
type KB struct {
	Path        string
	Fingerprint string // hex SHA-256 of the file's bytes
	Passages    []Passage
}

// Load reads a knowledge base from JSONL (one {id, title, text} object per
// line, or a Pyserini/Anserini collection's {id, contents}) or Parquet
// (columns id, title, text), chosen by the file extension, or from a
// Pyserini collection directory of JSONL files (loadCollectionDir).
// Duplicate ids, empty texts and invalid UTF-8 are errors naming file and
// line (or row).
func Load(ctx context.Context, path string) (*KB, error) {
	return LoadLimited(ctx, path, Limits{})
}

// Limits bound what one knowledge-base record may hold, as data.max_*_bytes
// bound the datasets' (item 10 of issue 27: a 50 MB passage loaded, slowly).
// Zero values take the defaults.
type Limits struct {
	// MaxFieldBytes bounds a passage's id, title and text (default 1 MiB).
	MaxFieldBytes int
	// MaxRecordBytes bounds one JSONL line (default 16 MiB).
	MaxRecordBytes int
}

// Default limits.
const (
	DefaultMaxFieldBytes  = 1 << 20
	DefaultMaxRecordBytes = 16 << 20
)

func (l Limits) orDefaults() Limits {
	if l.MaxFieldBytes <= 0 {
		l.MaxFieldBytes = DefaultMaxFieldBytes
	}
	if l.MaxRecordBytes <= 0 {
		l.MaxRecordBytes = DefaultMaxRecordBytes
	}
	return l
}

// LoadLimited is Load with record limits (retrieval.kb_max_field_bytes,
// retrieval.kb_max_record_bytes).
func LoadLimited(ctx context.Context, path string, lim Limits) (*KB, error) {
	lim = lim.orDefaults()
	if st, err := os.Stat(path); err == nil && st.IsDir() {
		return loadCollectionDir(ctx, path, lim) // a Pyserini collection directory
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load knowledge base: %w", err)
	}
	sum := sha256.Sum256(raw)
	kb := &KB{Path: path, Fingerprint: hex.EncodeToString(sum[:])}
	if strings.HasSuffix(strings.ToLower(path), ".parquet") {
		kb.Passages, err = parsePassagesParquet(ctx, path, raw)
	} else {
		kb.Passages, err = parsePassagesJSONL(ctx, path, bytes.NewReader(raw), lim)
	}
	if err != nil {
		return nil, err
	}
	if len(kb.Passages) == 0 {
		return nil, fmt.Errorf("%s: knowledge base has no passages", path)
	}
	return kb, nil
}

type passageChecker struct {
	path string
	seen map[string]string // id → where it was first seen
	lim  Limits            // zero: the defaults
}

// checkRecord refuses a JSONL line over the record limit.
func (c *passageChecker) checkRecord(where string, line []byte) error {
	lim := c.lim.orDefaults()
	if len(line) > lim.MaxRecordBytes {
		return fmt.Errorf("%s:%s: record of %d bytes, at most %d (raise it with --set retrieval.kb_max_record_bytes=N)",
			c.path, where, len(line), lim.MaxRecordBytes)
	}
	return nil
}

func (c *passageChecker) check(where string, p Passage) error { return c.checkField(where, p, "text") }

// checkField checks a passage whose text came from textField ("text", or
// "contents" for a Pyserini collection), so that errors name the field the
// file has.
func (c *passageChecker) checkField(where string, p Passage, textField string) error {
	for _, f := range []struct{ name, v string }{{"id", p.ID}, {"title", p.Title}, {"text", p.Text}} {
		if !utf8.ValidString(f.v) {
			return fmt.Errorf("%s:%s: field %q: invalid UTF-8", c.path, where, f.name)
		}
	}
	lim := c.lim.orDefaults()
	for _, f := range []struct{ name, v string }{{"id", p.ID}, {"title", p.Title}, {textField, p.Text}} {
		if len(f.v) > lim.MaxFieldBytes {
			return fmt.Errorf("%s:%s: field %q: %d bytes, at most %d (raise it with --set retrieval.kb_max_field_bytes=N)",
				c.path, where, f.name, len(f.v), lim.MaxFieldBytes)
		}
	}
	if strings.TrimSpace(p.ID) == "" {
		return fmt.Errorf("%s:%s: field \"id\": missing or empty", c.path, where)
	}
	// Every evaluation writes its rankings as TREC runs, whose fields are
	// whitespace-separated: such an id would fail only after the whole run.
	if strings.ContainsAny(p.ID, " \t\n\v\f\r") {
		return fmt.Errorf("%s:%s: field \"id\": passage id %q contains whitespace (a TREC run's docno cannot)", c.path, where, p.ID)
	}
	if strings.TrimSpace(p.Text) == "" {
		return fmt.Errorf("%s:%s: field %q: empty text for passage %q", c.path, where, textField, p.ID)
	}
	if c.seen == nil { // the caller finds duplicates itself (a streaming build, by sorting)
		return nil
	}
	if first, dup := c.seen[p.ID]; dup {
		return fmt.Errorf("%s:%s: field \"id\": duplicate passage id %q (first at %s)", c.path, where, p.ID, first)
	}
	c.seen[p.ID] = where
	return nil
}

func parsePassagesJSONL(ctx context.Context, path string, r io.Reader, lim Limits) ([]Passage, error) {
	br := bufio.NewReaderSize(r, 1<<20)
	chk := &passageChecker{path: path, seen: map[string]string{}, lim: lim}
	var out []Passage
	for lineNo := 1; ; lineNo++ {
		if lineNo%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		line, err := br.ReadBytes('\n')
		if lineNo == 1 {
			// A UTF-8 byte-order mark, as the conversation loaders accept.
			line = bytes.TrimPrefix(line, []byte(utf8BOM))
		}
		if len(bytes.TrimSpace(line)) > 0 {
			where := strconv.Itoa(lineNo)
			// encoding/json silently replaces invalid UTF-8 with U+FFFD, so the
			// raw bytes are checked first.
			if err := chk.checkRecord(where, line); err != nil {
				return nil, err
			}
			if !utf8.Valid(line) {
				return nil, fmt.Errorf("%s:%s: invalid UTF-8", path, where)
			}
			p, textField, jerr := decodePassageLine(line)
			if jerr != nil {
				return nil, fmt.Errorf("%s:%s: %w", path, where, explainKBLine(line, jerr))
			}
			if cerr := chk.checkField(where, p, textField); cerr != nil {
				return nil, cerr
			}
			out = append(out, p)
		}
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: read: %w", path, lineNo, err)
		}
	}
}

// utf8BOM is the byte-order mark some editors put at the start of a file.
const utf8BOM = "\ufeff"

// decodePassageLine reads one JSONL record: himes's {id, title, text} or a
// Pyserini/Anserini JsonCollection record {id, contents} (whose contents may
// be Search-R1's `"Title"\ntext`; a separate title keeps contents whole).
// Ids may be strings or numbers, as Anserini accepts both. It returns the
// field the text came from.
func decodePassageLine(line []byte) (Passage, string, error) {
	var rec struct {
		ID       json.RawMessage `json:"id"`
		Title    *string         `json:"title"`
		Text     *string         `json:"text"`
		Contents *string         `json:"contents"`
		// Known and not used: the datasets' passage source, and meta for
		// anything else.
		Source json.RawMessage `json:"source"`
		Meta   json.RawMessage `json:"meta"`
	}
	// Unknown fields are refused, as in the datasets: a misspelt "text"
	// would otherwise be dropped silently.
	dec := json.NewDecoder(bytes.NewReader(line))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		if strings.HasPrefix(err.Error(), "json: unknown field") {
			return Passage{}, "", fmt.Errorf("%s (known: id, title, text, contents, source; put other fields under meta)",
				strings.TrimPrefix(err.Error(), "json: "))
		}
		if uerr := json.Unmarshal(line, &rec); uerr != nil {
			return Passage{}, "", uerr // encoding/json's own wording for a syntax error
		}
		return Passage{}, "", err
	}
	if dec.More() {
		return Passage{}, "", errors.New("trailing data after the JSON object")
	}
	var p Passage
	if len(rec.ID) > 0 && string(rec.ID) != "null" {
		var id DocID
		if err := id.UnmarshalJSON(rec.ID); err != nil {
			return Passage{}, "", fmt.Errorf("field \"id\": want a string or a number, got %s", rec.ID)
		}
		p.ID = string(id)
	}
	if rec.Title != nil {
		p.Title = *rec.Title
	}
	switch {
	case rec.Text != nil && rec.Contents != nil:
		return Passage{}, "", errors.New(`fields "text" and "contents": a record has one or the other`)
	case rec.Contents != nil:
		if rec.Title != nil {
			p.Text = *rec.Contents
		} else {
			p.Title, p.Text = ParseContents(*rec.Contents)
		}
		return p, "contents", nil
	case rec.Text != nil:
		p.Text = *rec.Text
	}
	return p, "text", nil
}

func parsePassagesParquet(ctx context.Context, path string, raw []byte) ([]Passage, error) {
	tbl, err := parquetfile.ReadTable(ctx, path, raw, 4096)
	if err != nil {
		return nil, err
	}
	defer tbl.Release()
	cols := map[string]int{}
	for i, f := range tbl.Schema().Fields() {
		cols[f.Name] = i
	}
	get := func(name string, required bool) ([]string, error) {
		i, ok := cols[name]
		if !ok {
			if required {
				return nil, fmt.Errorf("%s: parquet has no column %q", path, name)
			}
			return make([]string, tbl.NumRows()), nil
		}
		return stringColumn(tbl.Column(i), path, name)
	}
	ids, err := get("id", true)
	if err != nil {
		return nil, err
	}
	titles, err := get("title", false)
	if err != nil {
		return nil, err
	}
	texts, err := get("text", true)
	if err != nil {
		return nil, err
	}
	chk := &passageChecker{path: path, seen: map[string]string{}}
	out := make([]Passage, len(ids))
	for i := range ids {
		out[i] = Passage{ID: ids[i], Title: titles[i], Text: texts[i]}
		if err := chk.check("row "+strconv.Itoa(i+1), out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func stringColumn(col *arrow.Column, path, name string) ([]string, error) {
	var out []string
	for _, chunk := range col.Data().Chunks() {
		switch a := chunk.(type) {
		case *array.String:
			for i := 0; i < a.Len(); i++ {
				out = append(out, a.Value(i))
			}
		case *array.LargeString:
			for i := 0; i < a.Len(); i++ {
				out = append(out, a.Value(i))
			}
		default:
			return nil, fmt.Errorf("%s: column %q: want string, got %s", path, name, chunk.DataType())
		}
	}
	return out, nil
}

// ChunkPassages splits each passage into overlapping windows of words
// (whitespace-separated) of size words, starting every stride words; the last
// window ends at the passage's end. words == 0 gives one chunk per passage.
// Chunk ids are "<passage id>#<window index>"; the title is kept on every
// chunk (it is indexed with the chunk's text).
func ChunkPassages(ps []Passage, words, stride int) ([]Chunk, error) {
	if words < 0 || stride < 0 {
		return nil, fmt.Errorf("chunking: words (%d) and stride (%d) must be ≥ 0", words, stride)
	}
	if words > 0 && (stride == 0 || stride > words) {
		return nil, fmt.Errorf("chunking: stride must be in [1, %d] (the window size), got %d", words, stride)
	}
	var out []Chunk
	for _, p := range ps {
		if words == 0 {
			out = append(out, Chunk{ID: p.ID + "#0", PassageID: p.ID, Title: p.Title, Text: p.Text})
			continue
		}
		ws := strings.Fields(p.Text)
		for i, start := 0, 0; ; i, start = i+1, start+stride {
			end := min(start+words, len(ws))
			out = append(out, Chunk{ID: p.ID + "#" + strconv.Itoa(i), PassageID: p.ID, Title: p.Title,
				Text: strings.Join(ws[start:end], " ")})
			if end == len(ws) {
				break
			}
		}
	}
	return out, nil
}

// ChunkPassageID is the passage a chunk id belongs to: the inverse of the
// "<passage id>#<window index>" scheme of ChunkPassages.
func ChunkPassageID(chunkID string) string {
	if i := strings.LastIndexByte(chunkID, '#'); i >= 0 {
		return chunkID[:i]
	}
	return chunkID
}

// IndexText is what an index sees of a chunk: title then text.
func (c Chunk) IndexText() string {
	if c.Title == "" {
		return c.Text
	}
	return c.Title + " " + c.Text
}
