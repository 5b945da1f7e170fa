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
	"hash"
	"math"
	"os"
	"path/filepath"
	"sort"
	"unsafe"

	"github.com/himes-rl/himes/analysis"
)

// The on-disk index (DiskIndexFile) holds what a search touches, laid out
// so that it is used in place through a read-only memory map: opening reads
// only a fixed trailer and the metadata, and resident memory grows with the
// pages queries touch. It also stores every chunk's title and text, so a
// pipeline serves texts from disk without loading the knowledge base.
//
// Layout: sections (each 8-byte aligned, little endian, see the sec*
// constants) then the metadata JSON, then a fixed trailer:
//
//	numSections × {off u64, len u64, sha256[32]}
//	metaOff u64, metaLen u64, version u32, numSections u32, magic[8]
//	sha256(meta ‖ trailer up to here)[32]
//
// Opening verifies the trailer's checksum (so the section table and the
// metadata are trusted) and every size and bound that can be checked
// without reading a section; VerifyDiskIndex also hashes every section and
// decodes every posting (`himes index info` runs it).
const (
	// DiskIndexFile is the on-disk index's name inside its directory.
	DiskIndexFile = "index.disk"
	// DiskFormatVersion is bumped whenever the on-disk layout or what it
	// encodes changes; another version is refused, not guessed at.
	DiskFormatVersion = 1
)

var diskMagic = [8]byte{'H', 'I', 'M', 'E', 'S', 'D', 'K', '1'}

// Sections of the on-disk index, in the order they are written.
const (
	secTexts     = iota // per document: uvarint len(title), title, text
	secTextOff          // u64 × (N+1)
	secIDOff            // u64 × (N+1)
	secIDs              // id bytes, documents in ascending id order
	secDocLen           // u32 × N
	secNorm             // f64 × N: k1·(1 − b + b·|d|/avgdl)
	secPostings         // compressed blocks (see postingLists)
	secTermOff          // u64 × (V+1)
	secTerms            // term bytes, ascending
	secDF               // u32 × V
	secTermBlk          // u32 × (V+1)
	secIDF              // f64 × V
	secMaxSat           // f64 × V
	secBlockOff         // u64 × blocks
	secBlockLast        // u32 × blocks
	numSections
)

var secNames = [numSections]string{"texts", "text offsets", "id offsets", "ids", "document lengths", "length norms",
	"postings", "term offsets", "terms", "document frequencies", "term blocks", "idf", "max saturation",
	"block offsets", "block last documents"}

const diskTrailerSize = numSections*48 + 8 + 8 + 4 + 4 + 8 + 32

type diskSection struct {
	off, len uint64
	sum      [32]byte
}

// diskWriter writes the sections of an on-disk index in order, hashing
// each: its binWriter writes through the sink, which counts and hashes.
type diskWriter struct {
	binWriter
	sink sectionSink
	f    *os.File
	cur  int
	secs [numSections]diskSection
}

// sectionSink is where a diskWriter's values go: the buffered file, the
// current section's hash and the file offset.
type sectionSink struct {
	bw  *bufio.Writer
	h   hash.Hash
	off uint64
}

func (s *sectionSink) Write(b []byte) (int, error) {
	n, err := s.bw.Write(b)
	s.h.Write(b[:n])
	s.off += uint64(n)
	return n, err
}

func newDiskWriter(f *os.File) *diskWriter {
	w := &diskWriter{f: f, sink: sectionSink{bw: bufio.NewWriterSize(f, 1<<20), h: sha256.New()}, cur: -1}
	w.binWriter.w = &w.sink
	return w
}

// offset is the file offset of the next byte written.
func (w *diskWriter) offset() uint64 { return w.sink.off }

// writeRaw writes b outside every section (padding, metadata, trailer).
func (w *diskWriter) writeRaw(b []byte) {
	if w.err == nil {
		var n int
		n, w.err = w.sink.bw.Write(b)
		w.sink.off += uint64(n)
	}
}

// begin starts section s (sections are written in increasing order).
func (w *diskWriter) begin(s int) {
	if s <= w.cur {
		panic("disk index sections out of order")
	}
	w.end()
	for w.sink.off%8 != 0 {
		w.writeRaw([]byte{0})
	}
	w.cur = s
	w.secs[s].off = w.sink.off
	w.sink.h.Reset()
}

func (w *diskWriter) end() {
	if w.cur >= 0 && w.secs[w.cur].len == 0 && w.sink.off >= w.secs[w.cur].off {
		w.secs[w.cur].len = w.sink.off - w.secs[w.cur].off
		copy(w.secs[w.cur].sum[:], w.sink.h.Sum(nil))
	}
}

// finish writes the metadata and the trailer and syncs the file.
func (w *diskWriter) finish(meta []byte) error {
	w.end()
	for w.sink.off%8 != 0 {
		w.writeRaw([]byte{0})
	}
	metaOff := w.sink.off
	tr := make([]byte, 0, diskTrailerSize)
	for _, s := range w.secs {
		tr = binary.LittleEndian.AppendUint64(tr, s.off)
		tr = binary.LittleEndian.AppendUint64(tr, s.len)
		tr = append(tr, s.sum[:]...)
	}
	tr = binary.LittleEndian.AppendUint64(tr, metaOff)
	tr = binary.LittleEndian.AppendUint64(tr, uint64(len(meta)))
	tr = binary.LittleEndian.AppendUint32(tr, DiskFormatVersion)
	tr = binary.LittleEndian.AppendUint32(tr, numSections)
	tr = append(tr, diskMagic[:]...)
	h := sha256.New()
	h.Write(meta)
	h.Write(tr)
	tr = h.Sum(tr)
	w.writeRaw(meta)
	w.writeRaw(tr)
	if w.err == nil {
		w.err = w.sink.bw.Flush()
	}
	if w.err == nil {
		w.err = w.f.Sync()
	}
	return w.err
}

// diskData is the memory-mapped part of an on-disk index that the Index
// itself does not hold: ids, terms and the document store.
type diskData struct {
	path     string
	mem      []byte
	unmap    func() error
	secs     [numSections]diskSection
	n        int
	idOff    []uint64
	ids      []byte
	textOff  []uint64
	texts    []byte
	termOff  []uint64
	terms    []byte
	metaJSON []byte
}

func (d *diskData) section(s int) []byte {
	return d.mem[d.secs[s].off : d.secs[s].off+d.secs[s].len]
}

func (d *diskData) id(i int) string { return string(d.ids[d.idOff[i]:d.idOff[i+1]]) }

func (d *diskData) term(t int) []byte { return d.terms[d.termOff[t]:d.termOff[t+1]] }

// lookup finds an analyzed term by binary search over the sorted terms.
func (d *diskData) lookup(s string) (uint32, bool) {
	nt := len(d.termOff) - 1
	t := sort.Search(nt, func(i int) bool { return string(d.term(i)) >= s })
	if t < nt && string(d.term(t)) == s {
		return uint32(t), true
	}
	return 0, false
}

// lookupID finds a document by id (documents are in ascending id order).
func (d *diskData) lookupID(id string) (int, bool) {
	i := sort.Search(d.n, func(i int) bool { return string(d.ids[d.idOff[i]:d.idOff[i+1]]) >= id })
	if i < d.n && string(d.ids[d.idOff[i]:d.idOff[i+1]]) == id {
		return i, true
	}
	return 0, false
}

// doc reads document i's title and text from the document store.
func (d *diskData) doc(i int) (title, text string, err error) {
	lo, hi := d.textOff[i], d.textOff[i+1]
	if lo > hi || hi > uint64(len(d.texts)) {
		return "", "", fmt.Errorf("%s: %w: document %d's text offsets out of range", d.path, ErrIndexCorrupt, i)
	}
	rec := d.texts[lo:hi]
	tl, n := binary.Uvarint(rec)
	if n <= 0 || tl > uint64(len(rec)-n) {
		return "", "", fmt.Errorf("%s: %w: document %d's record is damaged", d.path, ErrIndexCorrupt, i)
	}
	return string(rec[n : n+int(tl)]), string(rec[n+int(tl):]), nil
}

// IsDisk reports whether the index is an on-disk (memory-mapped) one.
func (ix *Index) IsDisk() bool { return ix.disk != nil }

// Doc returns document d's title and text from an on-disk index's
// document store (an in-memory index keeps no texts: an error).
func (ix *Index) Doc(d int) (title, text string, err error) {
	if ix.disk == nil {
		return "", "", errors.New("an in-memory index keeps no texts")
	}
	return ix.disk.doc(d)
}

// DocNum finds a document by id: in an on-disk index by binary search over
// its ids; false for an in-memory index.
func (ix *Index) DocNum(id string) (int, bool) {
	if ix.disk == nil {
		return 0, false
	}
	return ix.disk.lookupID(id)
}

// Close unmaps an on-disk index; it must not be searched afterwards. A
// no-op for an in-memory index.
func (ix *Index) Close() error {
	if ix.disk == nil || ix.disk.unmap == nil {
		return nil
	}
	err := ix.disk.unmap()
	ix.disk.unmap = nil
	return err
}

// littleEndianHost decides whether sections can be used in place; a
// big-endian host decodes copies instead (portable, but resident).
var littleEndianHost = func() bool { x := uint16(1); return *(*byte)(unsafe.Pointer(&x)) == 1 }()

func viewU32(b []byte) []uint32 {
	n := len(b) / 4
	if n == 0 {
		return []uint32{}
	}
	if littleEndianHost {
		return unsafe.Slice((*uint32)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]uint32, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint32(b[4*i:])
	}
	return out
}

func viewU64(b []byte) []uint64 {
	n := len(b) / 8
	if n == 0 {
		return []uint64{}
	}
	if littleEndianHost {
		return unsafe.Slice((*uint64)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]uint64, n)
	for i := range out {
		out[i] = binary.LittleEndian.Uint64(b[8*i:])
	}
	return out
}

func viewF64(b []byte) []float64 {
	n := len(b) / 8
	if n == 0 {
		return []float64{}
	}
	if littleEndianHost {
		return unsafe.Slice((*float64)(unsafe.Pointer(&b[0])), n)
	}
	out := make([]float64, n)
	for i := range out {
		out[i] = math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:]))
	}
	return out
}

// HasDiskIndex reports whether dir holds an on-disk index.
func HasDiskIndex(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, DiskIndexFile))
	return err == nil
}

// OpenDiskIndex maps dir/index.disk. It reads the trailer and metadata
// only, checking the trailer's checksum, the format version, the analyzer
// and every section's size against the metadata; the sections themselves
// are read when searches touch them (VerifyDiskIndex checks them all).
func OpenDiskIndex(dir string) (*Index, IndexMeta, error) {
	path := filepath.Join(dir, DiskIndexFile)
	f, err := os.Open(path)
	if err != nil {
		return nil, IndexMeta{}, fmt.Errorf("open index: %w", err)
	}
	defer f.Close() // the mapping outlives the descriptor
	st, err := f.Stat()
	if err != nil {
		return nil, IndexMeta{}, fmt.Errorf("open index: %w", err)
	}
	if st.Size() < diskTrailerSize {
		return nil, IndexMeta{}, fmt.Errorf("%s: %w: %d bytes, shorter than the trailer (truncated)", path, ErrIndexCorrupt, st.Size())
	}
	mem, unmap, err := mapFile(f, st.Size())
	if err != nil {
		return nil, IndexMeta{}, fmt.Errorf("open index %s: %w", path, err)
	}
	ix, meta, err := parseDiskIndex(path, mem)
	if err != nil {
		_ = unmap()
		return nil, meta, err
	}
	ix.disk.unmap = unmap
	for _, s := range []int{secTexts, secTextOff, secIDOff, secIDs, secTermOff, secTerms} {
		adviseRandom(mem, ix.disk.secs[s].off, ix.disk.secs[s].len)
	}
	return ix, meta, nil
}

func parseDiskIndex(path string, mem []byte) (*Index, IndexMeta, error) {
	var meta IndexMeta
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: %s: rebuild it with `himes index build --disk`", path, ErrIndexCorrupt, fmt.Sprintf(format, a...))
	}
	tr := mem[len(mem)-diskTrailerSize:]
	tail := tr[numSections*48+16:]
	if !bytes.Equal(tail[8:16], diskMagic[:]) {
		return nil, meta, corrupt("not a himes on-disk index (bad magic or truncated)")
	}
	if v := binary.LittleEndian.Uint32(tail); v != DiskFormatVersion {
		return nil, meta, fmt.Errorf("%s: on-disk index format version %d, this himes reads version %d: rebuild it with `himes index build --disk`", path, v, DiskFormatVersion)
	}
	if ns := binary.LittleEndian.Uint32(tail[4:]); ns != numSections {
		return nil, meta, corrupt("%d sections, want %d", ns, numSections)
	}
	body := len(mem) - diskTrailerSize
	metaOff := binary.LittleEndian.Uint64(tr[numSections*48:])
	metaLen := binary.LittleEndian.Uint64(tr[numSections*48+8:])
	if metaOff > uint64(body) || metaLen != uint64(body)-metaOff {
		return nil, meta, corrupt("metadata at %d+%d does not end at the trailer (%d)", metaOff, metaLen, body)
	}
	mj := mem[metaOff:body]
	h := sha256.New()
	h.Write(mj)
	h.Write(tr[:diskTrailerSize-32])
	if !bytes.Equal(h.Sum(nil), tr[diskTrailerSize-32:]) {
		return nil, meta, corrupt("trailer checksum mismatch (file damaged or truncated)")
	}
	if err := json.Unmarshal(mj, &meta); err != nil {
		return nil, meta, corrupt("metadata: %v", err)
	}
	meta.Checksum = fmt.Sprintf("%x", tr[diskTrailerSize-32:])
	an, ok := analysis.ByID(meta.Analyzer)
	if !ok {
		return nil, meta, fmt.Errorf("%s: index analyzed with %q, which this himes does not know: rebuild it", path, meta.Analyzer)
	}
	if meta.Scoring != "" {
		return nil, meta, fmt.Errorf("%s: index scored with %q, which this himes does not know: rebuild it", path, meta.Scoring)
	}
	if err := checkScoring(meta.Params.Scoring); err != nil {
		return nil, meta, fmt.Errorf("%s: %w: rebuild it", path, err)
	}
	d := &diskData{path: path, mem: mem, metaJSON: mj}
	prevEnd := uint64(0)
	for s := range d.secs {
		e := tr[s*48:]
		sec := diskSection{off: binary.LittleEndian.Uint64(e), len: binary.LittleEndian.Uint64(e[8:])}
		copy(sec.sum[:], e[16:48])
		if sec.off%8 != 0 || sec.off < prevEnd || sec.off > metaOff || sec.len > metaOff-sec.off {
			return nil, meta, corrupt("section %s at %d+%d out of place", secNames[s], sec.off, sec.len)
		}
		prevEnd = sec.off + sec.len
		d.secs[s] = sec
	}
	n, nt := meta.Docs, meta.Terms
	nb := d.secs[secBlockLast].len / 4
	want := [numSections]uint64{secTextOff: 8 * uint64(n+1), secIDOff: 8 * uint64(n+1), secDocLen: 4 * uint64(n),
		secNorm: 8 * uint64(n), secTermOff: 8 * uint64(nt+1), secDF: 4 * uint64(nt), secTermBlk: 4 * uint64(nt+1),
		secIDF: 8 * uint64(nt), secMaxSat: 8 * uint64(nt), secBlockOff: 8 * nb, secBlockLast: 4 * nb}
	if n <= 0 || nt < 0 {
		return nil, meta, corrupt("metadata says %d documents and %d terms", n, nt)
	}
	for s, w := range want {
		if s != secTexts && s != secIDs && s != secPostings && s != secTerms && d.secs[s].len != w {
			return nil, meta, corrupt("section %s has %d bytes, %d documents and %d terms need %d", secNames[s], d.secs[s].len, n, nt, w)
		}
	}
	d.n = n
	d.textOff, d.texts = viewU64(d.section(secTextOff)), d.section(secTexts)
	d.idOff, d.ids = viewU64(d.section(secIDOff)), d.section(secIDs)
	d.termOff, d.terms = viewU64(d.section(secTermOff)), d.section(secTerms)
	p := &postingLists{data: d.section(secPostings), blockOff: viewU64(d.section(secBlockOff)),
		blockLast: viewU32(d.section(secBlockLast)), termBlk: viewU32(d.section(secTermBlk)), df: viewU32(d.section(secDF))}
	// The ends of every offset table: enough that no search reads past a
	// section whatever the middle holds (VerifyDiskIndex checks the middle).
	switch {
	case d.textOff[0] != 0 || d.textOff[n] != uint64(len(d.texts)):
		return nil, meta, corrupt("text offsets do not span the document store")
	case d.idOff[0] != 0 || d.idOff[n] != uint64(len(d.ids)):
		return nil, meta, corrupt("id offsets do not span the ids")
	case d.termOff[0] != 0 || d.termOff[nt] != uint64(len(d.terms)):
		return nil, meta, corrupt("term offsets do not span the terms")
	case p.termBlk[0] != 0 || uint64(p.termBlk[nt]) != nb:
		return nil, meta, corrupt("term blocks do not span the %d blocks", nb)
	case nb > 0 && p.blockOff[nb-1] >= uint64(len(p.data)):
		return nil, meta, corrupt("block offsets beyond the postings")
	}
	if err := ix0params(meta.Params); err != nil {
		return nil, meta, corrupt("%v", err)
	}
	ix := &Index{params: meta.Params, analyzer: an, docLen: viewU32(d.section(secDocLen)), avgdl: meta.AvgDocLen,
		norm: viewF64(d.section(secNorm)), post: p, idf: viewF64(d.section(secIDF)), maxSat: viewF64(d.section(secMaxSat)), disk: d}
	if normScoring(meta.Params.Scoring) == ScoringLucene {
		if meta.NonEmptyDocs > n || meta.TotalTokens < uint64(meta.NonEmptyDocs) || meta.NonEmptyDocs == 0 && meta.Postings > 0 {
			return nil, meta, corrupt("lucene scoring needs the length statistics, and the metadata says %d tokens in %d non-empty documents of %d", meta.TotalTokens, meta.NonEmptyDocs, n)
		}
		// The norms come from the stored lengths and the idf from its
		// section (Lucene's float idf), so opening touches no per-document
		// or per-term data.
		ix.luc = lucenePartStats(meta.Params, meta.TotalTokens, meta.NonEmptyDocs)
		ix.luc.docLen = ix.docLen
	}
	return ix, meta, nil
}

func ix0params(p BM25Params) error {
	if p.K1 < 0 || p.B < 0 || p.B > 1 || math.IsNaN(p.K1) || math.IsNaN(p.B) {
		return fmt.Errorf("bad parameters %+v", p)
	}
	return nil
}

// VerifyDiskIndex checks every byte of an open on-disk index: each
// section's SHA-256, ids and terms strictly ascending, offsets monotonic,
// every posting decodable and in range. It reads the whole file.
func VerifyDiskIndex(ctx context.Context, ix *Index) error {
	d := ix.disk
	if d == nil {
		return errors.New("verify: not an on-disk index")
	}
	corrupt := func(format string, a ...any) error {
		return fmt.Errorf("%s: %w: %s: rebuild it with `himes index build --disk`", d.path, ErrIndexCorrupt, fmt.Sprintf(format, a...))
	}
	for s := range d.secs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if sha256.Sum256(d.section(s)) != d.secs[s].sum {
			return corrupt("section %s: checksum mismatch", secNames[s])
		}
	}
	monotonic := func(off []uint64, what string) error {
		for i := 1; i < len(off); i++ {
			if off[i] < off[i-1] {
				return corrupt("%s offsets decrease at %d", what, i)
			}
		}
		return nil
	}
	for _, c := range []struct {
		off  []uint64
		what string
	}{{d.textOff, "text"}, {d.idOff, "id"}, {d.termOff, "term"}, {ix.post.blockOff, "block"}} {
		if err := monotonic(c.off, c.what); err != nil {
			return err
		}
	}
	for i := 1; i < d.n; i++ {
		if bytes.Compare(d.ids[d.idOff[i-1]:d.idOff[i]], d.ids[d.idOff[i]:d.idOff[i+1]]) >= 0 {
			return corrupt("document ids not strictly ascending at %d", i)
		}
	}
	for t := 1; t < len(d.termOff)-1; t++ {
		if bytes.Compare(d.term(t-1), d.term(t)) >= 0 {
			return corrupt("terms not strictly ascending at %d", t)
		}
	}
	for i := 0; i < d.n; i++ {
		if _, _, err := d.doc(i); err != nil {
			return err
		}
	}
	if err := ix.post.validate(d.n); err != nil {
		return corrupt("%v", err)
	}
	return nil
}

// SectionSize is the size of one section of an on-disk index.
type SectionSize struct {
	Name  string
	Bytes int64
}

// Sections lists an on-disk index's sections and their sizes (nil in memory).
func (ix *Index) Sections() []SectionSize {
	if ix.disk == nil {
		return nil
	}
	out := make([]SectionSize, numSections)
	for s, sec := range ix.disk.secs {
		out[s] = SectionSize{Name: secNames[s], Bytes: int64(sec.len)}
	}
	return out
}
