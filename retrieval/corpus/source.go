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
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/apache/arrow-go/v18/arrow/array"
	"github.com/apache/arrow-go/v18/arrow/memory"
	"github.com/apache/arrow-go/v18/parquet/file"
	"github.com/apache/arrow-go/v18/parquet/pqarrow"
)

// Ref locates one chunk in a knowledge-base file: the passage's record
// (byte offset and length of its JSONL line, or its Parquet row) and the
// window index within it.
type Ref struct {
	ID   string // the chunk's id
	off  int64
	n    int32
	line int32
	win  int32
}

// Source streams a knowledge-base file for a build that never holds it
// (the on-disk index): Scan reads every record once and lists its chunks,
// Chunk re-reads one by its Ref. A JSONL file is re-read by offset.
//
// A Parquet KB is streamed a batch of rows at a time into a spill file of
// JSONL records beside the index (removed by Close), which the re-reads
// then use as they use a JSONL KB: neither layout is ever held.
type Source struct {
	path        string
	words       int // the chunking Scan was given, which Chunk re-applies
	stride      int
	lastOff     int64 // the record whose chunks are in chunks (-1: none)
	chunks      []Chunk
	f           *os.File
	spillDir    string   // where a Parquet KB's spill file goes
	spill       *os.File // the records re-read for a Parquet KB; nil for JSONL
	spillSize   int64
	fingerprint string
	size        int64
	modTime     int64
	lim         Limits // record limits (SetLimits; zero: the defaults)
	win         []byte // a window of the file at winOff, for sequential re-reads
	winOff      int64
}

// OpenSource opens the knowledge base at path; spillDir takes a Parquet
// KB's spill file.
func OpenSource(path, spillDir string) (*Source, error) {
	if err := refuseCollectionDir(path); err != nil {
		return nil, err
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("load knowledge base: %w", err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("load knowledge base: %w", err)
	}
	return &Source{path: path, f: f, spillDir: spillDir, size: st.Size(), modTime: st.ModTime().UnixNano(), lastOff: -1}, nil
}

// SetLimits sets the record limits Scan checks (call before Scan).
func (s *Source) SetLimits(lim Limits) { s.lim = lim }

// Fingerprint is the hex SHA-256 of the file (known after Scan).
func (s *Source) Fingerprint() string { return s.fingerprint }

// Size is the file's size in bytes when it was opened.
func (s *Source) Size() int64 { return s.size }

// ModTime is the file's modification time (Unix nanoseconds) when it was opened.
func (s *Source) ModTime() int64 { return s.modTime }

// Close closes the file and removes the spill file.
func (s *Source) Close() {
	s.f.Close()
	if s.spill != nil {
		s.spill.Close()
		os.Remove(s.spill.Name())
	}
}

// where names r's record in errors: its line, or its Parquet row.
func (s *Source) where(r Ref) string {
	if s.spill != nil {
		return "row " + strconv.Itoa(int(r.line))
	}
	return strconv.Itoa(int(r.line))
}

// Scan reads every record once: hashes the file, checks each record as
// Load does and lists its chunks cut by ChunkPassages(words, stride), sorted
// by id (the document order of every index). An empty knowledge base and a
// duplicate passage id (adjacent once sorted) are errors.
func (s *Source) Scan(ctx context.Context, words, stride int) ([]Ref, error) {
	return s.ScanProgress(ctx, words, stride, nil)
}

// ScanProgress is Scan telling progress (when set) the MiB of a JSONL
// knowledge base of a MiB or more read so far of its size, from 0.
func (s *Source) ScanProgress(ctx context.Context, words, stride int, progress func(doneMiB, totalMiB int)) ([]Ref, error) {
	if progress == nil || s.size < 1<<20 {
		progress = func(int, int) {} // under a MiB: nothing to show
	}
	refs, err := s.scan(ctx, words, stride, progress)
	if err != nil {
		return nil, err
	}
	if len(refs) == 0 {
		return nil, fmt.Errorf("%s: knowledge base has no passages", s.path)
	}
	slices.SortFunc(refs, func(a, b Ref) int { return strings.Compare(a.ID, b.ID) })
	for i := 1; i < len(refs); i++ {
		if refs[i].ID == refs[i-1].ID {
			a, b := refs[i-1], refs[i]
			if a.line > b.line {
				a, b = b, a
			}
			return nil, fmt.Errorf("%s:%s: field \"id\": duplicate passage id %q (first at %s)", s.path, s.where(b),
				ChunkPassageID(b.ID), s.where(a))
		}
	}
	return refs, nil
}

func (s *Source) scan(ctx context.Context, words, stride int, progress func(doneMiB, totalMiB int)) ([]Ref, error) {
	s.words, s.stride = words, stride
	var refs []Ref
	add := func(p Passage, off int64, n, line int) error {
		chunks, err := ChunkPassages([]Passage{p}, words, stride)
		if err != nil {
			return err
		}
		if line > math.MaxInt32 || n > math.MaxInt32 {
			return fmt.Errorf("%s:%d: record or line number too large", s.path, line)
		}
		for i, c := range chunks {
			refs = append(refs, Ref{ID: c.ID, off: off, n: int32(n), line: int32(line), win: int32(i)})
		}
		return nil
	}
	chk := &passageChecker{path: s.path, lim: s.lim}
	if strings.HasSuffix(strings.ToLower(s.path), ".parquet") {
		if err := s.spillParquet(ctx, chk, add); err != nil {
			return nil, err
		}
		return refs, nil
	}
	h := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(s.f, h), 1<<20)
	var off int64
	progress(0, int(s.size>>20))
	for lineNo := 1; ; lineNo++ {
		if lineNo%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			progress(int(off>>20), int(s.size>>20))
		}
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s:%d: read: %w", s.path, lineNo, err)
		}
		if lineNo == 1 && bytes.HasPrefix(line, []byte(utf8BOM)) {
			// A byte-order mark: the first record starts after it.
			off += int64(len(utf8BOM))
			line = line[len(utf8BOM):]
		}
		if len(bytes.TrimSpace(line)) > 0 {
			where := strconv.Itoa(lineNo)
			if err := chk.checkRecord(where, line); err != nil {
				return nil, err
			}
			if !utf8.Valid(line) {
				return nil, fmt.Errorf("%s:%s: invalid UTF-8", s.path, where)
			}
			p, field, jerr := decodePassageLine(line)
			if jerr != nil {
				return nil, fmt.Errorf("%s:%s: %w", s.path, where, explainKBLine(line, jerr))
			}
			if cerr := chk.checkField(where, p, field); cerr != nil {
				return nil, cerr
			}
			if err := add(p, off, len(line), lineNo); err != nil {
				return nil, err
			}
		}
		off += int64(len(line))
		if errors.Is(err, io.EOF) {
			break
		}
	}
	if off != s.size {
		return nil, fmt.Errorf("%s: changed while reading (%d bytes, %d at the start)", s.path, off, s.size)
	}
	progress(int(s.size>>20), int(s.size>>20))
	s.fingerprint = hex.EncodeToString(h.Sum(nil))
	return refs, nil
}

// spillParquet reads a Parquet KB a batch of rows at a time (the columns
// and checks of Load: id and text required, title optional, all strings),
// hashes the file, and writes each passage as a JSONL record to the spill
// file, which passage then re-reads.
func (s *Source) spillParquet(ctx context.Context, chk *passageChecker, add func(Passage, int64, int, int) error) error {
	h := sha256.New()
	if _, err := io.Copy(h, io.NewSectionReader(s.f, 0, s.size)); err != nil {
		return fmt.Errorf("%s: read: %w", s.path, err)
	}
	s.fingerprint = hex.EncodeToString(h.Sum(nil))
	pf, err := file.NewParquetReader(io.NewSectionReader(s.f, 0, s.size))
	if err != nil {
		return fmt.Errorf("%s: open parquet: %w", s.path, err)
	}
	defer pf.Close()
	fr, err := pqarrow.NewFileReader(pf, pqarrow.ArrowReadProperties{BatchSize: 4096}, memory.DefaultAllocator)
	if err != nil {
		return fmt.Errorf("%s: parquet reader: %w", s.path, err)
	}
	var cols []int
	names := []string{"id", "title", "text"}
	at := map[string]int{}
	for _, name := range names {
		i := pf.MetaData().Schema.ColumnIndexByName(name)
		if i < 0 {
			if name == "title" {
				continue
			}
			return fmt.Errorf("%s: parquet has no column %q", s.path, name)
		}
		at[name] = len(cols)
		cols = append(cols, i)
	}
	rr, err := fr.GetRecordReader(ctx, cols, nil)
	if err != nil {
		return fmt.Errorf("%s: read parquet: %w", s.path, err)
	}
	defer rr.Release()
	if err := os.MkdirAll(s.spillDir, 0o755); err != nil {
		return fmt.Errorf("index build: %w", err)
	}
	if s.spill, err = os.CreateTemp(s.spillDir, ".kb-*.jsonl"); err != nil {
		return fmt.Errorf("index build: %w", err)
	}
	bw := bufio.NewWriterSize(s.spill, 1<<20)
	row := 0
	var off int64
	for rr.Next() {
		if err := ctx.Err(); err != nil {
			return err
		}
		rec := rr.RecordBatch()
		col := func(name string) (func(int) string, error) {
			i, ok := at[name]
			if !ok {
				return func(int) string { return "" }, nil
			}
			switch a := rec.Column(i).(type) {
			case *array.String:
				return a.Value, nil
			case *array.LargeString:
				return a.Value, nil
			default:
				return nil, fmt.Errorf("%s: column %q: want string, got %s", s.path, name, a.DataType())
			}
		}
		id, err := col("id")
		if err != nil {
			return err
		}
		title, err := col("title")
		if err != nil {
			return err
		}
		text, err := col("text")
		if err != nil {
			return err
		}
		for i := range int(rec.NumRows()) {
			row++
			p := Passage{ID: id(i), Title: title(i), Text: text(i)}
			if err := chk.check("row "+strconv.Itoa(row), p); err != nil {
				return err
			}
			line, err := json.Marshal(struct {
				ID    string `json:"id"`
				Title string `json:"title"`
				Text  string `json:"text"`
			}{p.ID, p.Title, p.Text})
			if err != nil {
				return err
			}
			line = append(line, '\n')
			if _, err := bw.Write(line); err != nil {
				return fmt.Errorf("index build: spill %s: %w", s.path, err)
			}
			if err := add(p, off, len(line), row); err != nil {
				return err
			}
			off += int64(len(line))
		}
	}
	if err := rr.Err(); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: read parquet: %w", s.path, err)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("index build: spill %s: %w", s.path, err)
	}
	s.spillSize = off
	return nil
}

// Chunk re-reads the chunk r locates (its record from the spill file for a
// Parquet KB; a passage's chunks are cut once for consecutive Refs of one
// record, as the document order gives them). A record that no longer holds
// the chunk is an error: the file changed since Scan.
func (s *Source) Chunk(r Ref) (Chunk, error) {
	if r.off != s.lastOff {
		p, err := s.passage(r)
		if err == nil {
			s.chunks, err = ChunkPassages([]Passage{p}, s.words, s.stride)
		}
		if err != nil {
			s.lastOff = -1
			return Chunk{}, err
		}
		s.lastOff = r.off
	}
	if int(r.win) >= len(s.chunks) || s.chunks[r.win].ID != r.ID {
		return Chunk{}, fmt.Errorf("%s:%s: passage changed while indexing", s.path, s.where(r))
	}
	return s.chunks[r.win], nil
}

// passage re-reads the record of r (from the spill file for a Parquet KB).
func (s *Source) passage(r Ref) (Passage, error) {
	f, size := s.f, s.size
	if s.spill != nil {
		f, size = s.spill, s.spillSize
	}
	end := r.off + int64(r.n)
	if r.off < s.winOff || end > s.winOff+int64(len(s.win)) {
		n := max(int64(r.n), 1<<20)
		if cap(s.win) < int(n) {
			s.win = make([]byte, n)
		}
		s.win = s.win[:min(n, size-r.off)]
		if _, err := f.ReadAt(s.win, r.off); err != nil && !errors.Is(err, io.EOF) {
			return Passage{}, fmt.Errorf("%s:%s: re-read: %w", s.path, s.where(r), err)
		}
		s.winOff = r.off
	}
	line := s.win[r.off-s.winOff : end-s.winOff]
	p, _, err := decodePassageLine(line)
	if err != nil {
		return Passage{}, fmt.Errorf("%s:%s: changed while indexing: %w", s.path, s.where(r), err)
	}
	return p, nil
}
