package hser

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// internTable maps token bytes to dense ids for one call: open addressing,
// keys stored as spans into the caller's buffer. Ids are assigned in order of
// first occurrence, so they do not depend on the hash.
//
// The slots are not cleared between calls: each slot carries the generation
// that wrote it, and reset only bumps the generation, so a call costs its
// tokens, not the table size.
type internTable struct {
	slots []internSlot
	keys  []internKey // id → its first occurrence
	n     int
	mask  uint64
	gen   uint32 // current generation, 1 ≤ gen < 1<<24; slots of other generations are empty
}

// internSlot is one hash-table entry. tag is gen<<8 | min(len, 255), so one
// compare checks both that the slot is live and that the lengths agree;
// packed is the token itself for tokens of at most 8 bytes (little-endian,
// zero-padded) and its hash for longer ones, so most lookups finish without
// touching keys or the token bytes.
type internSlot struct {
	packed uint64
	tag    uint32
	id     int32
}

// internKey is a token's span; packed as in internSlot.
type internKey struct {
	span
	packed uint64
}

const maxGen = 1<<24 - 1

// reset empties the table for at most tokens distinct tokens.
func (t *internTable) reset(tokens int) {
	size := 16
	for size < 2*tokens {
		size <<= 1
	}
	t.resize(size)
}

// maxASCIITokens bounds the distinct tokens of n bytes of ASCII text: at
// most 36 of one character ([a-z0-9]), and every longer one takes at least
// 3 bytes with its separator (the last one of a text 2).
func maxASCIITokens(n int) int { return 37 + n/3 }

func (t *internTable) resize(size int) {
	if len(t.slots) < size {
		t.slots = make([]internSlot, size)
		t.gen = 0
	}
	if t.gen >= maxGen {
		clear(t.slots)
		t.gen = 0
	}
	t.gen++
	// A larger table from an earlier call is kept but only its first size
	// slots are used (so a small call stays in cache); the generation makes
	// every slot this call has not written empty.
	t.mask = uint64(size - 1)
	t.keys = t.keys[:0]
	t.n = 0
}

// articleIDs is the number of ids seedArticles reserves.
const articleIDs = 3

// seedArticles interns the English articles a, an and the first, as ids 0,
// 1 and 2, so the unicode EM and F1 can tell them by id. Their keys' spans
// have the right length but point nowhere: keys of at most 8 bytes are
// compared by their packed value only.
func (t *internTable) seedArticles() {
	for _, w := range [articleIDs]string{"a", "an", "the"} {
		var packed uint64
		for i := range len(w) {
			packed |= uint64(w[i]) << (8 * i)
		}
		t.lookup(nil, span{0, int32(len(w))}, packed, hashPacked(packed, len(w)))
	}
}

// withSlack makes sure 8 bytes past len(buf) are addressable, so intern can
// load any short token as one 64-bit word.
func withSlack(buf []byte) []byte {
	n := len(buf)
	return append(buf, 0, 0, 0, 0, 0, 0, 0, 0)[:n]
}

// withTextSlack makes sure textSlack bytes past len(buf) are addressable
// (see internASCII).
func withTextSlack(buf []byte) []byte {
	n := len(buf)
	return slices.Grow(buf, textSlack)[:n]
}

// lenMask keeps the low n bytes of a 64-bit word, 1 ≤ n ≤ 8.
func lenMask(n int) uint64 { return ^uint64(0) >> (64 - 8*uint(n)) }

// hashPacked mixes a token of at most 8 bytes.
func hashPacked(packed uint64, n int) uint64 {
	hi, lo := bits.Mul64(packed^uint64(n)<<59, 0x9E3779B97F4A7C15)
	return hi ^ lo
}

// intern appends the ids of spans (tokens of buf, which must have 8 bytes of
// slack, see withSlack).
func (t *internTable) intern(ids []int32, buf []byte, spans []span) []int32 {
	full := buf[:cap(buf)]
	for _, sp := range spans {
		n := int(sp.end - sp.start)
		var packed, h uint64
		if n <= 8 {
			packed = binary.LittleEndian.Uint64(full[sp.start:]) & lenMask(n)
			h = hashPacked(packed, n)
		} else {
			h = hashToken(buf[sp.start:sp.end])
			packed = h
		}
		ids = append(ids, t.lookup(buf, sp, packed, h))
	}
	return ids
}

// lookup returns the id of the token buf[sp.start:sp.end], adding it if
// new; packed and h are as intern computes them.
func (t *internTable) lookup(buf []byte, sp span, packed, h uint64) int32 {
	n := int(sp.end - sp.start)
	tag := t.gen<<8 | uint32(min(n, 255))
	for i := h & t.mask; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.tag == tag && sl.packed == packed {
			if n <= 8 {
				return sl.id
			}
			if k := t.keys[sl.id]; string(buf[k.start:k.end]) == string(buf[sp.start:sp.end]) {
				return sl.id
			}
			continue
		}
		if sl.tag>>8 != t.gen {
			id := int32(len(t.keys))
			t.keys = append(t.keys, internKey{sp, packed})
			t.n = len(t.keys)
			*sl = internSlot{packed, tag, id}
			return id
		}
	}
}

// hashToken is a fast non-cryptographic hash for short tokens: 8 bytes at a
// time, multiply-xorshift mixing. Collisions only cost a probe (keys are
// compared byte for byte).
func hashToken(w []byte) uint64 {
	const m = 0x9E3779B97F4A7C15
	h := uint64(len(w)) * m
	for len(w) >= 8 {
		h = (h ^ binary.LittleEndian.Uint64(w)) * m
		h ^= h >> 29
		w = w[8:]
	}
	var x uint64
	for i, c := range w {
		x |= uint64(c) << (8 * uint(i))
	}
	hi, lo := bits.Mul64(h^x, m)
	return hi ^ lo
}

// alnumBits returns one bit per byte of x (bit i for byte i, little-endian)
// set when that byte is an ASCII letter or digit. Every byte of x must be
// ASCII (< 0x80): then no byte sum below carries into its neighbour.
func alnumBits(x uint64) uint64 {
	const ones = 0x0101010101010101
	// Per byte, the high bit of x + (0x80-lo) is set iff the byte is ≥ lo,
	// and that of x + (0x7f-hi) iff it is > hi.
	digit := (x + ones*(0x80-'0')) &^ (x + ones*(0x7f-'9'))
	y := x | 0x2020202020202020 // letters to lowercase; digits unchanged
	letter := (y + ones*(0x80-'a')) &^ (y + ones*(0x7f-'z'))
	m := (digit | letter) & 0x8080808080808080
	// Gather the eight high bits into the top byte.
	return m * 0x0002040810204081 >> 56
}

// textSlack is the number of addressable bytes internASCII needs past the
// text: it loads 64 bytes at a time.
const textSlack = 64

// internASCII tokenizes src[off:end], which must be ASCII, into runs of
// ASCII letters and digits — the tokens of both tokenizers (unstemmed) on
// ASCII text — and appends them lowercased to dst, their spans in dst to
// spans and their interned ids to ids. cap(src) must be at least
// end+textSlack.
//
// This is the fast path of scoring. A 64-byte block is classified eight
// bytes at a time (alnumBits) into a bit mask; token starts and ends are
// its 0→1 and 1→0 edges, taken pairwise, so the loop branches per token and
// per block, not per byte. Each token is lowercased, packed and hashed with
// a few word operations. Stores go to dst, never to src: a load that partly
// overlaps an earlier store stalls the CPU.
func (t *internTable) internASCII(ids []int32, spans []span, dst, src []byte, off, end int) ([]int32, []span, []byte) {
	src = src[:cap(src)]
	_ = src[end+textSlack-1]
	w := len(dst)
	dst = slices.Grow(dst, end-off+8)
	out := dst[:cap(dst)]
	const lower = 0x2020202020202020
	slots, mask := t.slots, t.mask
	var carry uint64 // 1 when the byte before the block is in a token
	open := 0        // start of that token
	// base runs one block past the text when its length is a multiple of
	// 64, so that a token ending the text is closed by masked-off bytes.
	for base := off; base <= end; base += 64 {
		blk := src[base : base+64]
		var m uint64
		for k := range 8 {
			m |= alnumBits(binary.LittleEndian.Uint64(blk[8*k:])) << (8 * k)
		}
		if r := end - base; r < 64 {
			m &= 1<<uint(r) - 1
		}
		prev := m<<1 | carry
		starts := m &^ prev
		ends := prev &^ m // bit i: byte i is the first after a token
		carried := carry != 0
		carry = m >> 63
		for ends != 0 {
			e := base + bits.TrailingZeros64(ends)
			ends &= ends - 1
			s := open
			if carried {
				carried = false
			} else {
				s = base + bits.TrailingZeros64(starts)
				starts &= starts - 1
			}
			n := e - s
			var packed, h uint64
			if n <= 8 {
				packed = (binary.LittleEndian.Uint64(src[s:]) | lower) & lenMask(n)
				binary.LittleEndian.PutUint64(out[w:], packed)
				h = hashPacked(packed, n)
			} else {
				for j := 0; j < n; j += 8 {
					binary.LittleEndian.PutUint64(out[w+j:], binary.LittleEndian.Uint64(src[s+j:])|lower)
				}
				h = hashToken(out[w : w+n])
				packed = h
			}
			sp := span{int32(w), int32(w + n)}
			w += n
			spans = append(spans, sp)
			// t.lookup, inlined for the common case.
			if sl := &slots[h&mask]; n <= 8 && sl.tag == t.gen<<8|uint32(n) && sl.packed == packed {
				ids = append(ids, sl.id)
			} else {
				ids = append(ids, t.lookup(out, sp, packed, h))
			}
		}
		if starts != 0 { // a token runs into the next block
			open = base + bits.TrailingZeros64(starts)
		}
	}
	return ids, spans, out[:w]
}
