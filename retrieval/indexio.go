package retrieval

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/himes-rl/himes/analysis"
)

// IndexFormatVersion is bumped whenever the on-disk layout or the scoring it
// encodes changes; an index of another version is refused, not guessed at.
const IndexFormatVersion = 1

// indexMagic starts every index file.
var indexMagic = [8]byte{'H', 'I', 'M', 'E', 'S', 'B', 'M', '1'}

// IndexFile is the name of the index inside its directory.
const IndexFile = "index.bin"

// IndexMeta describes a persisted index; it is stored inside the index file
// (covered by its checksum) and mirrored to meta.json for humans.
type IndexMeta struct {
	FormatVersion int        `json:"format_version"`
	Analyzer      string     `json:"analyzer"`
	Params        BM25Params `json:"params"`
	ChunkWords    int        `json:"chunk_words"`
	ChunkStride   int        `json:"chunk_stride"`
	KBPath        string     `json:"kb_path"`
	// KBFingerprint is the SHA-256 of the knowledge-base file the index was
	// built from; loading against a different KB is an error (stale index).
	KBFingerprint string `json:"kb_fingerprint"`
	// KBSize and KBModTime (Unix nanoseconds) let an on-disk index refuse a
	// changed KB without hashing it; when only the time differs the KB is
	// hashed and compared with KBFingerprint.
	KBSize    int64 `json:"kb_size,omitempty"`
	KBModTime int64 `json:"kb_mod_time,omitempty"`
	// Scoring names the scoring formula when it is not the default Lucene
	// BM25 in float64 ("" is that default); an index of an unknown scoring
	// is refused.
	Scoring string `json:"scoring,omitempty"`
	// Layout is "disk" for an on-disk index (DiskIndexFile), "" for index.bin.
	Layout    string  `json:"layout,omitempty"`
	Docs      int     `json:"docs"`
	Terms     int     `json:"terms"`
	Postings  int     `json:"postings"`
	AvgDocLen float64 `json:"avg_doc_len"`
	// TotalTokens and NonEmptyDocs (documents with at least one token) are
	// the on-disk index's length statistics for lucene scoring, whose avgdl
	// is TotalTokens / NonEmptyDocs.
	TotalTokens  uint64    `json:"total_tokens,omitempty"`
	NonEmptyDocs int       `json:"nonempty_docs,omitempty"`
	Built        time.Time `json:"built"`
	// Checksum is the hex SHA-256 of the index file's body (filled on read).
	Checksum string `json:"checksum,omitempty"`
}

// SaveIndex writes ix to dir/index.bin (atomically: temp file + rename) and
// dir/meta.json. Layout, little endian:
//
//	magic[8] version:u32 metaLen:u32 meta(JSON)
//	ids: n:u32 then n × (len:u32 bytes)
//	docLen: n × u32
//	terms: m:u32 then m × (len:u32 bytes)
//	postings: termBlk (m+1) × u32, df m × u32, blocks:u32,
//	  blockOff blocks × u64, blockLast blocks × u32, dataLen:u64 data
//	  (the compressed in-memory layout, see postingLists)
//	sha256(everything above)[32]
func SaveIndex(ctx context.Context, dir string, ix *Index, meta IndexMeta) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	meta.FormatVersion = IndexFormatVersion
	meta.Analyzer = ix.analyzer.ID()
	meta.Params = ix.params
	meta.Docs, meta.Terms, meta.Postings, meta.AvgDocLen = ix.Len(), ix.NumTerms(), ix.NumPostings(), ix.avgdl
	metaJSON, err := json.Marshal(meta)
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".index-*.tmp")
	if err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(tmp, h), 1<<20)
	w := &binWriter{w: bw}
	w.bytes(indexMagic[:])
	w.u32(IndexFormatVersion)
	w.u32(uint32(len(metaJSON)))
	w.bytes(metaJSON)
	w.strings(ix.ids)
	w.u32s(ix.docLen)
	if err := ctx.Err(); err != nil {
		tmp.Close()
		return err
	}
	w.u32(uint32(ix.dict.len()))
	for t := range uint32(ix.dict.len()) {
		s := ix.dict.term(t)
		w.u32(uint32(len(s)))
		w.str(s)
	}
	p := ix.post
	w.u32s(p.termBlk)
	w.u32s(p.df)
	w.u32(uint32(len(p.blockLast)))
	w.u64s(p.blockOff)
	w.u32s(p.blockLast)
	w.u64(uint64(len(p.data)))
	w.bytes(p.data)
	if w.err == nil {
		w.err = bw.Flush()
	}
	if w.err == nil {
		_, w.err = tmp.Write(h.Sum(nil))
	}
	if w.err == nil {
		w.err = tmp.Sync()
	}
	if cerr := tmp.Close(); w.err == nil {
		w.err = cerr
	}
	if w.err != nil {
		return fmt.Errorf("save index %s: %w", dir, w.err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, IndexFile)); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	// one index per directory: an older on-disk one would take precedence
	if err := os.Remove(filepath.Join(dir, DiskIndexFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("save index: %w", err)
	}
	pretty, _ := json.MarshalIndent(meta, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), append(pretty, '\n'), 0o644); err != nil {
		return fmt.Errorf("save index: %w", err)
	}
	return nil
}

// ErrIndexCorrupt is wrapped by load errors caused by damaged index files.
var ErrIndexCorrupt = errors.New("index corrupt")

// LoadIndex reads dir/index.bin, verifying magic, version and checksum
// before trusting any byte of it.
func LoadIndex(ctx context.Context, dir string) (*Index, IndexMeta, error) {
	path := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, IndexMeta{}, fmt.Errorf("load index: %w", err)
	}
	meta, body, err := checkIndexFile(path, raw)
	if err != nil {
		return nil, meta, err
	}
	r := &binReader{b: body}
	an, _ := analysis.ByID(meta.Analyzer) // checked by checkIndexFile
	ix := &Index{params: meta.Params, analyzer: an}
	ix.ids = r.strings()
	ix.docLen = r.u32s(len(ix.ids))
	if err := ctx.Err(); err != nil {
		return nil, meta, err
	}
	termStr := r.strings()
	if r.err == nil {
		ix.dict, r.err = newTermDict(termStr)
	}
	p := &postingLists{}
	p.termBlk = r.u32s(len(termStr) + 1)
	p.df = r.u32s(len(termStr))
	nb := int(r.u32())
	if r.err == nil && nb > len(r.b)/12 {
		r.err = fmt.Errorf("%d blocks do not fit in %d bytes", nb, len(r.b))
	}
	if r.err == nil {
		p.blockOff = make([]uint64, nb)
		for i := range p.blockOff {
			p.blockOff[i] = r.u64()
		}
	}
	p.blockLast = r.u32s(nb)
	p.data = slices.Clone(r.take(int(min(r.u64(), uint64(len(r.b)+1)))))
	ix.post = p
	if r.err == nil && len(r.b) != 0 {
		r.err = fmt.Errorf("%d trailing bytes", len(r.b))
	}
	if r.err != nil {
		return nil, meta, fmt.Errorf("%s: %w: %w", path, ErrIndexCorrupt, r.err)
	}
	if err := ix.validate(); err != nil {
		return nil, meta, fmt.Errorf("%s: %w: %w", path, ErrIndexCorrupt, err)
	}
	var total uint64
	for _, l := range ix.docLen {
		total += uint64(l)
	}
	ix.finish(total)
	return ix, meta, nil
}

// ReadIndexMeta verifies an index file and returns its metadata without
// decoding the postings.
func ReadIndexMeta(dir string) (IndexMeta, error) {
	path := filepath.Join(dir, IndexFile)
	raw, err := os.ReadFile(path)
	if err != nil {
		return IndexMeta{}, fmt.Errorf("read index: %w", err)
	}
	meta, _, err := checkIndexFile(path, raw)
	return meta, err
}

func checkIndexFile(path string, raw []byte) (IndexMeta, []byte, error) {
	var meta IndexMeta
	if len(raw) < len(indexMagic)+8+sha256.Size || !bytes.Equal(raw[:8], indexMagic[:]) {
		return meta, nil, fmt.Errorf("%s: %w: not a himes BM25 index (bad magic or truncated)", path, ErrIndexCorrupt)
	}
	if v := binary.LittleEndian.Uint32(raw[8:]); v != IndexFormatVersion {
		return meta, nil, fmt.Errorf("%s: index format version %d, this himes reads version %d: rebuild it with `himes index build`", path, v, IndexFormatVersion)
	}
	body, sum := raw[:len(raw)-sha256.Size], raw[len(raw)-sha256.Size:]
	got := sha256.Sum256(body)
	if !bytes.Equal(got[:], sum) {
		return meta, nil, fmt.Errorf("%s: %w: checksum mismatch (file damaged or truncated): rebuild it with `himes index build`", path, ErrIndexCorrupt)
	}
	r := &binReader{b: body[16:]}
	mj := r.take(int(binary.LittleEndian.Uint32(raw[12:])))
	if r.err != nil {
		return meta, nil, fmt.Errorf("%s: %w: %w", path, ErrIndexCorrupt, r.err)
	}
	if err := json.Unmarshal(mj, &meta); err != nil {
		return meta, nil, fmt.Errorf("%s: %w: metadata: %w", path, ErrIndexCorrupt, err)
	}
	meta.Checksum = fmt.Sprintf("%x", got)
	if _, ok := analysis.ByID(meta.Analyzer); !ok {
		return meta, nil, fmt.Errorf("%s: index analyzed with %q, which this himes does not know: rebuild it", path, meta.Analyzer)
	}
	if err := checkScoring(meta.Params.Scoring); err != nil {
		return meta, nil, fmt.Errorf("%s: index built for %w, which this himes does not know: rebuild it", path, err)
	}
	return meta, r.b, nil
}

// validate checks the structural invariants searching relies on, so a
// well-checksummed but inconsistent file cannot cause out-of-range reads.
func (ix *Index) validate() error {
	n := uint32(len(ix.ids))
	if n == 0 {
		return errors.New("no documents")
	}
	for i := 1; i < len(ix.ids); i++ {
		if ix.ids[i-1] >= ix.ids[i] {
			return fmt.Errorf("document ids not strictly ascending at %d", i)
		}
	}
	if len(ix.post.df) != ix.dict.len() {
		return errors.New("posting lists do not match the vocabulary")
	}
	if err := ix.post.validate(int(n)); err != nil {
		return err
	}
	if ix.params.K1 < 0 || ix.params.B < 0 || ix.params.B > 1 || math.IsNaN(ix.params.K1) || math.IsNaN(ix.params.B) {
		return fmt.Errorf("bad parameters %+v", ix.params)
	}
	return nil
}
