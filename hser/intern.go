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
	keys  []span // id → its first occurrence
	n     int
	mask  uint64
	shift uint   // a key's first slot is its hash >> shift (the top bits)
	gen   uint32 // current generation, 1 ≤ gen ≤ maxGen; slots of other generations are empty
}

// internSlot is one hash-table entry. tag is gen<<8 | min(len, 255), so one
// compare checks both that the slot is live and that the lengths agree. A
// token of at most 16 bytes is its own key: lo and hi hold its bytes
// (little-endian, zero-padded), so it is found without touching the token
// bytes. For a longer one lo is its hash and hi 0, and a match is confirmed
// on the bytes.
type internSlot struct {
	lo, hi uint64
	tag    uint32
	id     int32
}

// maxPacked is the longest token that is its own key.
const maxPacked = 16

const maxGen = 1<<24 - 1

// reset empties the table for at most tokens distinct tokens.
func (t *internTable) reset(tokens int) {
	size, bits := 16, 4
	for size < 2*tokens {
		size <<= 1
		bits++
	}
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
	t.shift = uint(64 - bits)
	t.keys = slices.Grow(t.keys[:0], tokens+1)
	t.n = 0
}

// articleIDs is the number of ids seedArticles reserves.
const articleIDs = 3

// seedArticles interns the English articles a, an and the first, as ids 0,
// 1 and 2, so the unicode EM and F1 can tell them by id. Their keys' spans
// have the right length but point nowhere: keys of at most 16 bytes are
// compared by their packed value only.
func (t *internTable) seedArticles() {
	for _, a := range &articleKeys {
		t.lookup(nil, span{0, int32(a.n)}, a.lo, 0, a.h)
	}
}

// articleKeys are the articles' packed keys and hashes, computed once.
var articleKeys = func() (k [articleIDs]struct {
	lo, h uint64
	n     int
}) {
	for i, w := range [articleIDs]string{"a", "an", "the"} {
		for j := range len(w) {
			k[i].lo |= uint64(w[j]) << (8 * j)
		}
		k[i].n, k[i].h = len(w), hashPacked(k[i].lo, 0, len(w))
	}
	return k
}()

// packSlack is the number of addressable bytes intern needs past a buffer's
// length: it loads every short token as two 64-bit words.
const packSlack = 16

// withSlack makes sure packSlack bytes past len(buf) are addressable.
func withSlack(buf []byte) []byte {
	n := len(buf)
	return slices.Grow(buf, packSlack)[:n]
}

// packMasks returns the masks that keep the first n bytes of a 16-byte key
// split into two little-endian words (all ones for n > 16), from a table:
// cheaper than variable shifts.
func packMasks(n int) (lo, hi uint64) {
	m := &packMaskTab[min(uint(n), maxPacked+1)]
	return m[0], m[1]
}

var packMaskTab = func() (t [maxPacked + 2][2]uint64) {
	for n := range t {
		for i := range min(n, 16) {
			t[n][i/8] |= 0xff << (8 * (i % 8))
		}
	}
	return t
}()

// hashPacked hashes a token of at most 16 bytes: two multiplications, so
// only its top bits are well mixed (tables index by them).
func hashPacked(lo, hi uint64, n int) uint64 {
	return (lo*0x9E3779B97F4A7C15 ^ hi ^ uint64(n)) * 0xD6E8FEB86659FD93
}

// intern appends the ids of spans (tokens of buf, which must have
// packSlack bytes of slack, see withSlack).
func (t *internTable) intern(ids []int32, buf []byte, spans []span) []int32 {
	full := buf[:cap(buf)]
	for _, sp := range spans {
		// keyHash's computation, written out: it does not inline, and a
		// call per token cost the mixed-text scores ~3%.
		n := int(sp.end - sp.start)
		var lo, hi, h uint64
		if n <= maxPacked {
			ml, mh := packMasks(n)
			lo = binary.LittleEndian.Uint64(full[sp.start:]) & ml
			hi = binary.LittleEndian.Uint64(full[sp.start+8:]) & mh
			h = hashPacked(lo, hi, n)
		} else {
			h = hashToken(buf[sp.start:sp.end])
			lo = h
		}
		ids = append(ids, t.lookup(buf, sp, lo, hi, h))
	}
	return ids
}

// keyHash returns lookup's lo, hi and h for the key buf[sp.start:sp.end]
// (buf with packSlack bytes of slack): a key of at most maxPacked bytes
// packed into lo and hi, and their hash; a longer one's hash as lo and h.
// For the cold paths (forget, a long stem); intern and internSlow compute
// it inline.
func keyHash(buf []byte, sp span) (lo, hi, h uint64) {
	n := int(sp.end - sp.start)
	if n <= maxPacked {
		full := buf[:cap(buf)]
		ml, mh := packMasks(n)
		lo = binary.LittleEndian.Uint64(full[sp.start:]) & ml
		hi = binary.LittleEndian.Uint64(full[sp.start+8:]) & mh
		return lo, hi, hashPacked(lo, hi, n)
	}
	h = hashToken(buf[sp.start:sp.end])
	return h, 0, h
}

// lookup returns the id of the token buf[sp.start:sp.end], adding it if
// new; lo, hi and h are as intern computes them.
func (t *internTable) lookup(buf []byte, sp span, lo, hi, h uint64) int32 {
	n := int(sp.end - sp.start)
	tag := t.gen<<8 | uint32(min(n, 255))
	for i := h >> t.shift; ; i = (i + 1) & t.mask {
		sl := &t.slots[i]
		if sl.tag == tag && sl.lo == lo && sl.hi == hi {
			if n <= maxPacked {
				return sl.id
			}
			if k := t.keys[sl.id]; string(buf[k.start:k.end]) == string(buf[sp.start:sp.end]) {
				return sl.id
			}
			continue
		}
		if sl.tag>>8 != t.gen {
			id := int32(len(t.keys))
			t.keys = append(t.keys, sp)
			t.n = len(t.keys)
			*sl = internSlot{lo, hi, tag, id}
			return id
		}
	}
}

// forget takes the keys from id n on out of the table, the last added
// first, leaving it as it was with n keys (the reference's, in
// rougeCached). Each was added to a slot that was then empty, and the keys
// added before it were probed past only slots filled earlier, so emptying
// the slots in reverse order restores every probe sequence. buf holds the
// keys' bytes.
func (t *internTable) forget(n int, buf []byte) {
	for id := len(t.keys) - 1; id >= n; id-- {
		_, _, h := keyHash(buf, t.keys[id])
		t.unslot(int32(id), h)
	}
	t.keys = t.keys[:n]
	t.n = n
}

// forgetHashed is forget for keys whose bytes are not at hand (stemTab's
// packed keys point nowhere): hs holds the hashes of the keys from id n on,
// in order.
func (t *internTable) forgetHashed(n int, hs []uint64) {
	if len(hs) != len(t.keys)-n {
		panic("hser: forgetHashed: one hash per key to forget")
	}
	for j := len(hs) - 1; j >= 0; j-- {
		t.unslot(int32(n+j), hs[j])
	}
	t.keys = t.keys[:n]
	t.n = n
}

// unslot empties the slot of key id, whose hash is h.
func (t *internTable) unslot(id int32, h uint64) {
	for i := h >> t.shift; ; i = (i + 1) & t.mask {
		if sl := &t.slots[i]; sl.id == id && sl.tag>>8 == t.gen {
			sl.tag = 0 // generation 0 is never current
			return
		}
	}
}

// hashToken is a fast non-cryptographic hash for long tokens: 8 bytes at a
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

// nonSpaceBits is alnumBits for "byte ≠ ' '", exact for any bytes.
func nonSpaceBits(x uint64) uint64 {
	y := x ^ 0x2020202020202020 // ' ' → 0
	// Per byte, the high bit of (y&0x7f)+0x7f is set iff y&0x7f ≠ 0.
	m := ((y & 0x7f7f7f7f7f7f7f7f) + 0x7f7f7f7f7f7f7f7f | y) & 0x8080808080808080
	return m * 0x0002040810204081 >> 56
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// textSlack is the number of addressable bytes internFields and the fast
// path's scan need past the text: they load 64 bytes at a time.
const textSlack = 64

// withTextSlack makes sure textSlack bytes past len(buf) are addressable.
func withTextSlack(buf []byte) []byte {
	n := len(buf)
	return slices.Grow(buf, textSlack)[:n]
}

// internFields appends the ids of the fields of src[off:end] — the runs
// of bytes other than ' ' (any bytes, kept as they are), as in a normalized
// answer — to ids and their bytes to dst (the first occurrence of each is
// t.keys[id], a span of dst). cap(src) must be at least end+textSlack, and
// the table must have been reset for all the fields.
//
// A 64-byte block is classified eight bytes at a time (nonSpaceBits) into
// a bit mask; field starts and ends are its 0→1 and 1→0 edges, taken
// pairwise, so the loop branches per field and per block, not per byte.
// Stores go to dst, never to src: a load that partly overlaps an earlier
// store stalls the CPU.
func (t *internTable) internFields(ids []int32, dst, src []byte, off, end int) ([]int32, []byte) {
	src = src[:cap(src)]
	_ = src[end+textSlack-1]
	w := len(dst)
	dst = slices.Grow(dst, end-off+maxPacked)
	out := dst[:cap(dst)]
	slots, shift, gen := t.slots, t.shift, t.gen
	// The keys slice has room for every token (reset) plus the key written
	// but not kept after the last one.
	nk := len(t.keys)
	t.keys = slices.Grow(t.keys, (end-off)/2+2)
	keys := t.keys[:cap(t.keys)]
	// Likewise ids has room for every token: a token and its separator
	// take two bytes, the last one one.
	ni := len(ids)
	ids = slices.Grow(ids, (end-off+1)/2)
	idv := ids[:cap(ids)]
	var carry uint64 // 1 when the byte before the block is in a token
	open := 0        // start of that token
	// base runs one block past the text when its length is a multiple of
	// 64, so that a token ending the text is closed by masked-off bytes.
	for base := off; base <= end; base += 64 {
		blk := src[base : base+64]
		var m uint64
		for k := range 8 {
			m |= nonSpaceBits(binary.LittleEndian.Uint64(blk[8*k:])) << (8 * k)
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
			// Both words are computed for every token (no branch on the
			// length); a token of up to 16 bytes is its own key.
			ml, mh := packMasks(n)
			lo := binary.LittleEndian.Uint64(src[s:]) & ml
			hi := binary.LittleEndian.Uint64(src[s+8:]) & mh
			binary.LittleEndian.PutUint64(out[w:], lo)
			binary.LittleEndian.PutUint64(out[w+8:], hi)
			if n > maxPacked { // the rest of a long token
				for j := 16; j < n; j += 8 {
					binary.LittleEndian.PutUint64(out[w+j:], binary.LittleEndian.Uint64(src[s+j:]))
				}
			}
			var h uint64
			if n <= maxPacked {
				h = hashPacked(lo, hi, n)
			} else {
				h = hashToken(out[w : w+n])
				lo, hi = h, 0
			}
			sp := span{int32(w), int32(w + n)}
			w += n
			// t.lookup, inlined for the common cases — a short token found
			// at its first probe, or any token whose first probe is empty —
			// without a branch between the two, as whether a token is new
			// is unpredictable: the slot and the key are written either
			// way (a found slot gets its own values again) and only a new
			// key is kept.
			sl := &slots[h>>shift]
			tag := gen<<8 | uint32(min(n, 255))
			empty := sl.tag>>8 != gen
			if empty || n <= maxPacked && sl.tag == tag && sl.lo == lo && sl.hi == hi {
				id := sl.id
				if empty {
					id = int32(nk)
				}
				keys[nk] = sp
				nk += b2i(empty)
				*sl = internSlot{lo, hi, tag, id}
				idv[ni] = id
				ni++
			} else {
				t.keys = keys[:nk]
				idv[ni] = t.lookup(out, sp, lo, hi, h)
				ni++
				nk = len(t.keys)
			}
		}
		if starts != 0 { // a token runs into the next block
			open = base + bits.TrailingZeros64(starts)
		}
	}
	t.keys = keys[:nk]
	t.n = nk
	return idv[:ni], out[:w]
}
