package retrieval

import (
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
)

// blockSize is the number of postings per compressed block: large enough
// for good compression, small enough that a seek decodes little.
const blockSize = 128

// postingLists stores every term's postings compressed: blocks of up to
// blockSize (document gap, tf) pairs as unsigned varints, with each block's
// last document kept uncompressed so a seek can skip whole blocks. Postings
// take ≈ 2–3 bytes instead of 8.
type postingLists struct {
	data      []byte   // all blocks, term after term
	blockOff  []uint64 // start of block b in data
	blockLast []uint32 // last document of block b
	termBlk   []uint32 // term t owns blocks [termBlk[t], termBlk[t+1])
	df        []uint32 // postings of term t
}

func (p *postingLists) numPostings() int {
	n := 0
	for _, d := range p.df {
		n += int(d)
	}
	return n
}

// bytes is the memory the posting lists hold.
func (p *postingLists) bytes() int {
	return len(p.data) + 8*len(p.blockOff) + 4*len(p.blockLast) + 4*len(p.termBlk) + 4*len(p.df)
}

// validate decodes everything once, checking the invariants cursors rely
// on, so a damaged or hostile file cannot cause out-of-range reads.
func (p *postingLists) validate(numDocs int) error {
	nt := len(p.df)
	if len(p.termBlk) != nt+1 || p.termBlk[0] != 0 || int(p.termBlk[nt]) != len(p.blockLast) || len(p.blockOff) != len(p.blockLast) {
		return fmt.Errorf("posting block tables inconsistent")
	}
	var c cursor
	for t := 0; t < nt; t++ {
		lo, hi := p.termBlk[t], p.termBlk[t+1]
		if lo > hi || p.df[t] == 0 || int(hi-lo) != (int(p.df[t])+blockSize-1)/blockSize {
			return fmt.Errorf("term %d: %d blocks for %d postings", t, hi-lo, p.df[t])
		}
		for b := lo; b < hi; b++ {
			if err := c.decode(p, uint32(t), int(b), numDocs); err != nil {
				return fmt.Errorf("term %d block %d: %w", t, b, err)
			}
		}
	}
	return nil
}

// cursor iterates one term's postings, a decoded block at a time.
type cursor struct {
	p         *postingLists
	t         uint32
	blk, end  int
	docs, tfs [blockSize]uint32
	n, i      int
	w, ub     float64 // query weight and score upper bound (MaxScore)
	qi        int     // position in the canonical summation order
}

func (c *cursor) init(p *postingLists, t uint32) {
	c.p, c.t = p, t
	c.blk, c.end = int(p.termBlk[t]), int(p.termBlk[t+1])
	c.load()
}

func (c *cursor) load() {
	c.i = 0
	if c.blk >= c.end {
		c.n = 0
		return
	}
	_ = c.decode(c.p, c.t, c.blk, 0) // validated when built or loaded
}

// decode fills docs/tfs from block b of term t; with numDocs > 0 it also
// checks bounds and order.
func (c *cursor) decode(p *postingLists, t uint32, b, numDocs int) error {
	first := int(p.termBlk[t])
	size := blockSize
	if b == int(p.termBlk[t+1])-1 {
		size = int(p.df[t]) - (b-first)*blockSize
	}
	prev := uint32(0)
	if b > first {
		prev = p.blockLast[b-1]
	}
	off := p.blockOff[b]
	if off > uint64(len(p.data)) {
		return fmt.Errorf("block offset %d beyond %d bytes", off, len(p.data))
	}
	buf := p.data[off:]
	pos := 0
	for k := 0; k < size; k++ {
		var gap, tf uint64
		// one-byte varints are the common case (small gaps and tfs)
		if pos < len(buf) && buf[pos] < 0x80 {
			gap = uint64(buf[pos])
			pos++
		} else {
			v, n := binary.Uvarint(buf[pos:])
			if n <= 0 {
				return fmt.Errorf("bad varint")
			}
			gap, pos = v, pos+n
		}
		if pos < len(buf) && buf[pos] < 0x80 {
			tf = uint64(buf[pos])
			pos++
		} else {
			v, n := binary.Uvarint(buf[pos:])
			if n <= 0 {
				return fmt.Errorf("bad varint")
			}
			tf, pos = v, pos+n
		}
		if numDocs > 0 {
			if gap > math.MaxUint32 || tf == 0 || tf > math.MaxUint32 || (gap == 0 && (k > 0 || b > first)) ||
				uint64(prev)+gap >= uint64(numDocs) {
				return fmt.Errorf("posting %d: gap %d tf %d out of range", k, gap, tf)
			}
		}
		prev += uint32(gap)
		c.docs[k], c.tfs[k] = prev, uint32(tf)
	}
	if numDocs > 0 && prev != p.blockLast[b] {
		return fmt.Errorf("last document %d, table says %d", prev, p.blockLast[b])
	}
	c.n = size
	return nil
}

func (c *cursor) doc() uint32 {
	if c.i < c.n {
		return c.docs[c.i]
	}
	return math.MaxUint32
}

func (c *cursor) tf() uint32 { return c.tfs[c.i] }

func (c *cursor) next() {
	c.i++
	if c.i >= c.n && c.n > 0 {
		c.blk++
		c.load()
	}
}

// seek advances to the first posting with document ≥ d, skipping whole
// blocks by their last document.
func (c *cursor) seek(d uint32) {
	if c.i >= c.n || c.docs[c.i] >= d {
		return
	}
	if d > c.p.blockLast[c.blk] {
		next := c.blk + 1
		c.blk = next + sort.Search(c.end-next, func(k int) bool { return c.p.blockLast[next+k] >= d })
		c.load()
		if c.n == 0 {
			return
		}
	}
	k, _ := slices.BinarySearch(c.docs[c.i:c.n], d)
	c.i += k
}
