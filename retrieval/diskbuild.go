package retrieval

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/himes-rl/himes/analysis"
	"github.com/himes-rl/himes/retrieval/corpus"
)

// DiskBuildOptions tune BuildDiskIndex; zero values take the defaults.
type DiskBuildOptions struct {
	// BlockDocs is the number of documents analyzed together and spilled as
	// one sorted run (default 32768): it bounds the build's working memory.
	BlockDocs int
	// Workers is the number of analysis goroutines (default GOMAXPROCS, ≤ 8).
	Workers int
	// Progress, when set, is told the MiB of a JSONL KB read ("scan", KBs
	// of a MiB or more), the chunks analyzed ("analyze") then the terms
	// merged ("merge") so far, from 0 at each stage's start.
	Progress BuildProgress
}

// BuildDiskIndex builds the on-disk index (DiskIndexFile) of a knowledge
// base in dir with cfg's analyzer, k1, b and chunking, without holding the
// KB or the postings in memory:
//
//  1. the KB is streamed once (JSONL; Parquet is read whole) to hash it,
//     check every record and list its chunk ids with where they come from;
//     the ids are sorted, giving the document numbers (duplicates are
//     adjacent, so found here);
//  2. chunks are re-read in document order, a block of BlockDocs at a time:
//     their texts go straight to the document store, the block is analyzed
//     in parallel and its postings are spilled as a run sorted by term;
//  3. the runs are merged term by term into the compressed posting blocks,
//     with idf and MaxScore bounds computed on the way (under lucene
//     scoring the idf section holds Lucene's float idf).
//
// The resulting index ranks exactly as BuildIndexWith over the same chunks.
func BuildDiskIndex(ctx context.Context, cfg Config, kbPath, dir string, opt DiskBuildOptions) (IndexMeta, error) {
	if cfg.UsesEmbedder("lsa") {
		return IndexMeta{}, errors.New("index build --disk: the lsa embedder is fitted on the texts in memory; build it with the in-memory index (without --disk)")
	}
	if err := checkScoring(cfg.Scoring); err != nil {
		return IndexMeta{}, fmt.Errorf("index build --disk: %w", err)
	}
	an, err := analysis.New(cfg.Analyzer)
	if err != nil {
		return IndexMeta{}, err
	}
	params := BM25Params{K1: cfg.K1, B: cfg.B}
	if normScoring(cfg.Scoring) == ScoringLucene {
		params.Scoring = ScoringLucene
	}
	if err := ix0params(params); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	if opt.BlockDocs <= 0 {
		opt.BlockDocs = 1 << 15
	}
	if opt.Workers <= 0 {
		opt.Workers = max(1, min(runtime.GOMAXPROCS(0), 8))
	}
	src, err := corpus.OpenSource(kbPath, dir)
	if err != nil {
		return IndexMeta{}, err
	}
	defer src.Close()
	src.SetLimits(cfg.KBLimits())
	var scanned func(done, total int)
	if opt.Progress != nil {
		scanned = func(done, total int) { opt.Progress("scan", done, total) }
	}
	refs, err := src.ScanProgress(ctx, cfg.ChunkWords, cfg.ChunkStride, scanned)
	if err != nil {
		return IndexMeta{}, err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	runDir, err := os.MkdirTemp(dir, ".runs-*")
	if err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	defer os.RemoveAll(runDir)
	tmp, err := os.CreateTemp(dir, ".index-*.tmp")
	if err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	defer os.Remove(tmp.Name()) // no-op after the rename
	defer tmp.Close()
	b := &diskBuilder{an: an, params: params, opt: opt, src: src, refs: refs, runDir: runDir, w: newDiskWriter(tmp),
		gterms: map[string]uint32{}}
	if err := b.build(ctx); err != nil {
		return IndexMeta{}, fmt.Errorf("index build %s: %w", dir, err)
	}
	abs, err := filepath.Abs(kbPath)
	if err != nil {
		abs = kbPath
	}
	meta := IndexMeta{FormatVersion: DiskFormatVersion, Layout: "disk", Analyzer: an.ID(), Params: params,
		ChunkWords: cfg.ChunkWords, ChunkStride: cfg.ChunkStride, KBPath: abs, KBFingerprint: src.Fingerprint(),
		KBSize: src.Size(), KBModTime: src.ModTime(), Docs: len(refs), Terms: len(b.gstrs), Postings: b.postings,
		AvgDocLen: b.avgdl, TotalTokens: b.totalLen, NonEmptyDocs: b.nonEmpty, Built: time.Now().UTC().Truncate(time.Second)}
	mj, err := json.Marshal(meta)
	if err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	if err := b.w.finish(mj); err != nil {
		return IndexMeta{}, fmt.Errorf("index build %s: %w", dir, err)
	}
	if err := tmp.Close(); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, DiskIndexFile)); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	// one index per directory: an older in-memory one would be ambiguous
	if err := os.Remove(filepath.Join(dir, IndexFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	pretty, _ := json.MarshalIndent(meta, "", "  ")
	if err := os.WriteFile(filepath.Join(dir, "meta.json"), append(pretty, '\n'), 0o644); err != nil {
		return IndexMeta{}, fmt.Errorf("index build: %w", err)
	}
	return meta, nil
}

type diskBuilder struct {
	an       analysis.Analyzer
	params   BM25Params
	opt      DiskBuildOptions
	src      *corpus.Source
	refs     []corpus.Ref
	runDir   string
	runs     []string
	w        *diskWriter
	gterms   map[string]uint32 // global term numbers, in first-appearance order
	gstrs    []string
	postings int
	avgdl    float64
	// totalLen and nonEmpty (documents with a token) are Lucene's avgdl
	// and docCount, recorded in the metadata.
	totalLen uint64
	nonEmpty int
}

// block is one block of documents read in document order.
type block struct {
	start int
	texts []string // what the index sees (title + text)
	recs  [][2]string
	err   error
}

func (b *diskBuilder) build(ctx context.Context) error {
	n := len(b.refs)
	textOff := make([]uint64, n+1)
	docLen := make([]uint32, n)
	blocks := make(chan *block, 1)
	readCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	go b.readBlocks(readCtx, blocks)
	w := b.w
	w.begin(secTexts)
	base := w.offset()
	ws := make([]analysisWorker, b.opt.Workers)
	for i := range ws {
		ws[i].an = b.an
	}
	parts := make([]chunkPart, len(ws))
	l2g := make([][]uint32, len(ws))
	var total uint64
	var rec []byte
	var sc runScratch
	if b.opt.Progress != nil {
		b.opt.Progress("analyze", 0, n)
	}
	for blk := range blocks {
		if blk.err != nil {
			return blk.err
		}
		for k, r := range blk.recs {
			rec = binary.AppendUvarint(rec[:0], uint64(len(r[0])))
			rec = append(append(rec, r[0]...), r[1]...)
			w.bytes(rec)
			textOff[blk.start+k+1] = w.offset() - base
		}
		bl := docLen[blk.start : blk.start+len(blk.texts)]
		per := (len(blk.texts) + len(ws) - 1) / len(ws)
		var wg sync.WaitGroup
		for i := range ws {
			lo, hi := min(i*per, len(blk.texts)), min((i+1)*per, len(blk.texts))
			clear(ws[i].lastSeen) // document numbers restart in every block
			wg.Go(func() { ws[i].analyze(&parts[i], blk.texts, lo, hi, bl) })
		}
		wg.Wait()
		for _, l := range bl {
			total += uint64(l)
		}
		if err := b.spill(&sc, parts, l2g); err != nil {
			return err
		}
		if w.err != nil {
			return w.err
		}
		if b.opt.Progress != nil {
			b.opt.Progress("analyze", blk.start+len(blk.texts), n)
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	w.begin(secTextOff)
	w.u64s(textOff)
	textOff = nil
	w.begin(secIDOff)
	off := uint64(0)
	w.u64(0)
	for _, r := range b.refs {
		off += uint64(len(r.ID))
		w.u64(off)
	}
	w.begin(secIDs)
	for _, r := range b.refs {
		w.str(r.ID)
	}
	b.refs = nil
	w.begin(secDocLen)
	w.u32s(docLen)
	b.totalLen = total
	for _, l := range docLen {
		if l > 0 {
			b.nonEmpty++
		}
	}
	b.avgdl = float64(total) / float64(n)
	if b.avgdl == 0 {
		b.avgdl = 1 // every document empty: lengths cannot matter (as finish)
	}
	norm := make([]float64, n)
	for d, l := range docLen {
		norm[d] = b.params.K1 * (1 - b.params.B + b.params.B*float64(l)/b.avgdl)
	}
	// Under lucene scoring the merge bounds each term by its largest
	// freq · cache[norm] (the norms are one byte a document while it runs).
	var luc *luceneStats
	if b.params.Scoring == ScoringLucene {
		luc = lucenePartStats(b.params, b.totalLen, b.nonEmpty)
		luc.norm = make([]uint8, n)
		for d, l := range docLen {
			luc.norm[d] = intToByte4(int(min(l, math.MaxInt32)))
		}
	}
	docLen = nil
	w.begin(secNorm)
	w.f64s(norm)
	if w.err != nil {
		return w.err
	}
	return b.merge(ctx, norm, luc)
}

// readBlocks re-reads the chunks in document order, a block at a time,
// overlapping the parsing with the analysis of the previous block.
func (b *diskBuilder) readBlocks(ctx context.Context, out chan<- *block) {
	defer close(out)
	for start := 0; start < len(b.refs); start += b.opt.BlockDocs {
		end := min(start+b.opt.BlockDocs, len(b.refs))
		blk := &block{start: start, texts: make([]string, 0, end-start), recs: make([][2]string, 0, end-start)}
		for _, r := range b.refs[start:end] {
			c, err := b.src.Chunk(r)
			if err != nil {
				blk.err = err
				break
			}
			blk.texts = append(blk.texts, c.IndexText())
			blk.recs = append(blk.recs, [2]string{c.Title, c.Text})
		}
		if blk.err == nil {
			blk.err = ctx.Err()
		}
		select {
		case out <- blk:
		case <-ctx.Done():
			return
		}
		if blk.err != nil {
			return
		}
	}
}

// runScratch is reused across blocks by spill.
type runScratch struct {
	g, d, tf []uint32 // postings of the block in analysis order
	cnt      []uint32
	sd, stf  []uint32
	present  []uint32
	buf      []byte
}

// spill maps the workers' terms to global terms and writes the block's
// postings as a run: terms in ascending byte order, each with its postings
// (block-relative document gaps and tfs) in document order.
func (b *diskBuilder) spill(sc *runScratch, parts []chunkPart, l2g [][]uint32) error {
	sc.g, sc.d, sc.tf = sc.g[:0], sc.d[:0], sc.tf[:0]
	for w := range parts {
		part := &parts[w]
		m := growTermMap(&l2g[w], len(part.strs))
		for k, d := range part.docs {
			pairs := part.pairs[part.docOff[k]:part.docOff[k+1]]
			for x := 0; x < len(pairs); x += 2 {
				g, _ := internTerm(m, pairs[x], part.strs, b.gterms, &b.gstrs)
				sc.g, sc.d, sc.tf = append(sc.g, g), append(sc.d, uint32(d)), append(sc.tf, pairs[x+1])
			}
		}
	}
	// counting sort by global term, stable: documents stay ascending
	for len(sc.cnt) < len(b.gstrs)+1 {
		sc.cnt = append(sc.cnt, 0)
	}
	cnt := sc.cnt[:len(b.gstrs)+1]
	clear(cnt)
	sc.present = sc.present[:0]
	for _, g := range sc.g {
		if cnt[g+1] == 0 {
			sc.present = append(sc.present, g)
		}
		cnt[g+1]++
	}
	for i := 1; i < len(cnt); i++ {
		cnt[i] += cnt[i-1]
	}
	sc.sd, sc.stf = slices.Grow(sc.sd[:0], len(sc.g))[:len(sc.g)], slices.Grow(sc.stf[:0], len(sc.g))[:len(sc.g)]
	for i, g := range sc.g {
		j := cnt[g]
		cnt[g]++
		sc.sd[j], sc.stf[j] = sc.d[i], sc.tf[i]
	}
	// cnt[g] is now the end of g's postings; its start is the previous end
	slices.SortFunc(sc.present, func(x, y uint32) int { return strings.Compare(b.gstrs[x], b.gstrs[y]) })
	f, err := os.Create(filepath.Join(b.runDir, "run-"+strconv.Itoa(len(b.runs))))
	if err != nil {
		return err
	}
	b.runs = append(b.runs, f.Name())
	bw := bufio.NewWriterSize(f, 1<<16)
	for _, g := range sc.present {
		hi := cnt[g]
		lo := uint32(0)
		if g > 0 {
			lo = cnt[g-1]
		}
		buf := binary.AppendUvarint(sc.buf[:0], uint64(g))
		buf = binary.AppendUvarint(buf, uint64(hi-lo))
		prev := uint32(0)
		for j := lo; j < hi; j++ {
			buf = binary.AppendUvarint(buf, uint64(sc.sd[j]-prev))
			buf = binary.AppendUvarint(buf, uint64(sc.stf[j]))
			prev = sc.sd[j]
		}
		sc.buf = buf
		if _, err := bw.Write(buf); err != nil {
			f.Close()
			return err
		}
	}
	if err := bw.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// runReader reads one spilled run sequentially.
type runReader struct {
	f    *os.File
	r    *bufio.Reader
	base uint32 // the run's first document
	head int64  // global term of the next entry, −1 at the end
	err  error
}

func (r *runReader) advance() {
	g, err := binary.ReadUvarint(r.r)
	switch {
	case errors.Is(err, io.EOF):
		r.head = -1
	case err != nil:
		r.head, r.err = -1, err
	default:
		r.head = int64(g)
	}
}

func (r *runReader) uvarint() uint32 {
	v, err := binary.ReadUvarint(r.r)
	if err != nil && r.err == nil {
		r.err = err
	}
	return uint32(v)
}

// merge writes the postings term by term (terms in ascending byte order,
// their postings from the runs in document order) and the tables.
func (b *diskBuilder) merge(ctx context.Context, norm []float64, luc *luceneStats) error {
	w := b.w
	order := make([]uint32, len(b.gstrs))
	for i := range order {
		order[i] = uint32(i)
	}
	slices.SortFunc(order, func(x, y uint32) int { return strings.Compare(b.gstrs[x], b.gstrs[y]) })
	runs := make([]*runReader, len(b.runs))
	for i, name := range b.runs {
		f, err := os.Open(name)
		if err != nil {
			return err
		}
		defer f.Close()
		runs[i] = &runReader{f: f, r: bufio.NewReaderSize(f, 1<<16), base: uint32(i * b.opt.BlockDocs)}
		runs[i].advance()
	}
	nt := len(order)
	df := make([]uint32, 0, nt)
	termBlk := make([]uint32, 1, nt+1)
	idf := make([]float64, 0, nt)
	maxSat := make([]float64, 0, nt)
	var blockOff []uint64
	var blockLast []uint32
	w.begin(secPostings)
	base := w.offset()
	var buf []byte
	n := float64(len(norm))
	for t, g := range order {
		if t%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if b.opt.Progress != nil {
				b.opt.Progress("merge", t, nt)
			}
		}
		var cnt, last uint32
		m := 0.0
		for _, r := range runs {
			if r.head != int64(g) {
				continue
			}
			k := r.uvarint()
			prev := r.base
			for j := uint32(0); j < k; j++ {
				doc := prev + r.uvarint()
				tf := r.uvarint()
				prev = doc
				if r.err != nil || doc >= uint32(len(norm)) || tf == 0 {
					return fmt.Errorf("run %s: damaged (%v)", r.f.Name(), r.err)
				}
				if cnt%blockSize == 0 {
					blockOff = append(blockOff, w.offset()-base+uint64(len(buf)))
				}
				buf = binary.AppendUvarint(buf, uint64(doc-last)) // the first posting's gap is the document itself
				buf = binary.AppendUvarint(buf, uint64(tf))
				last = doc
				cnt++
				if cnt%blockSize == 0 {
					blockLast = append(blockLast, doc)
				}
				if luc != nil {
					m = max(m, float64(luc.tfNorm(tf, doc))) // as luceneMaxTFNorm
				} else {
					f := float64(tf)
					m = max(m, float64(f/float64(f+norm[doc]))) // as Index.sat
				}
			}
			r.advance()
			if r.err != nil {
				return fmt.Errorf("run %s: %w", r.f.Name(), r.err)
			}
		}
		if cnt == 0 {
			return fmt.Errorf("term %q has no postings in any run", b.gstrs[g])
		}
		if cnt%blockSize != 0 {
			blockLast = append(blockLast, last)
		}
		if len(buf) >= 1<<16 {
			w.bytes(buf)
			buf = buf[:0]
		}
		termBlk = append(termBlk, uint32(len(blockLast)))
		df = append(df, cnt)
		d := float64(cnt)
		if b.params.Scoring == ScoringLucene {
			idf = append(idf, float64(luceneIDF(cnt, b.nonEmpty))) // as newLuceneStats
		} else {
			idf = append(idf, math.Log(1+(n-d+0.5)/(d+0.5))) // as finish
		}
		maxSat = append(maxSat, m)
		b.postings += int(cnt)
	}
	if b.opt.Progress != nil {
		b.opt.Progress("merge", nt, nt)
	}
	w.bytes(buf)
	for _, r := range runs {
		if r.head != -1 || r.err != nil {
			return fmt.Errorf("run %s not consumed (%v)", r.f.Name(), r.err)
		}
	}
	w.begin(secTermOff)
	off := uint64(0)
	w.u64(0)
	for _, g := range order {
		off += uint64(len(b.gstrs[g]))
		w.u64(off)
	}
	w.begin(secTerms)
	for _, g := range order {
		w.str(b.gstrs[g])
	}
	w.begin(secDF)
	w.u32s(df)
	w.begin(secTermBlk)
	w.u32s(termBlk)
	w.begin(secIDF)
	w.f64s(idf)
	w.begin(secMaxSat)
	w.f64s(maxSat)
	w.begin(secBlockOff)
	w.u64s(blockOff)
	w.begin(secBlockLast)
	w.u32s(blockLast)
	return w.err
}
