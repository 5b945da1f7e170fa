package retrieval

import (
	"fmt"
	"math"
	"math/bits"
)

// termDict is an in-memory index's vocabulary: every term's bytes in one
// arena, in term-number order, and an open-addressing hash table of term
// numbers. A term costs its bytes, 4 bytes of offset and ≈ 5–11 bytes of
// table, where a map[string]uint32 with a []string beside it costs ≈ 60
// bytes plus a separate allocation per string.
type termDict struct {
	data  []byte   // term t is data[off[t]:off[t+1]]
	off   []uint32 // len = number of terms + 1
	slots []uint32 // term number + 1, 0 for an empty slot; len a power of two
	shift uint     // 64 − log2(len(slots))
}

// newTermDict builds the dictionary of terms, numbered by their position;
// a term given twice is an error.
func newTermDict(terms []string) (*termDict, error) {
	size := 0
	for _, s := range terms {
		size += len(s)
	}
	if size > math.MaxUint32 || len(terms) >= math.MaxUint32 {
		return nil, fmt.Errorf("vocabulary of %d terms in %d bytes is too large", len(terms), size)
	}
	d := &termDict{data: make([]byte, 0, size), off: make([]uint32, 1, len(terms)+1)}
	for _, s := range terms {
		d.data = append(d.data, s...)
		d.off = append(d.off, uint32(len(d.data)))
	}
	// at most 3/4 full, so a miss ends at an empty slot after a few probes
	b := max(4, bits.Len(uint(len(terms)+len(terms)/3)))
	d.slots, d.shift = make([]uint32, 1<<b), uint(64-b)
	for t, s := range terms {
		i := d.home(s)
		for ; d.slots[i] != 0; i = (i + 1) & uint64(len(d.slots)-1) {
			if d.term(d.slots[i]-1) == s {
				return nil, fmt.Errorf("term %q twice in the vocabulary", s)
			}
		}
		d.slots[i] = uint32(t) + 1
	}
	return d, nil
}

// len is the number of terms.
func (d *termDict) len() int { return len(d.off) - 1 }

// term is term t's text.
func (d *termDict) term(t uint32) string { return string(d.data[d.off[t]:d.off[t+1]]) }

// home is the first slot probed for s: FNV-1a, spread over the table's
// bits by a Fibonacci multiplication.
func (d *termDict) home(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h = (h ^ uint64(s[i])) * 1099511628211
	}
	return h * 0x9E3779B97F4A7C15 >> d.shift
}

// lookup returns the number of term s.
func (d *termDict) lookup(s string) (uint32, bool) {
	mask := uint64(len(d.slots) - 1)
	for i := d.home(s); ; i = (i + 1) & mask {
		v := d.slots[i]
		if v == 0 {
			return 0, false
		}
		if t := v - 1; string(d.data[d.off[t]:d.off[t+1]]) == s {
			return t, true
		}
	}
}
