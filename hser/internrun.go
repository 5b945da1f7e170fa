package hser

import (
	"encoding/binary"
	"fmt"
)

// checkRun panics unless every write internRun may make lies within the
// slices: out gets at most the bytes from the first token's start to the
// last one's end, plus maxPacked of padding; keys, sqv and idv one entry
// per token; loads read 16 bytes from each token's start; a slot index is a
// hash's top bits.
func checkRun(tok []scanToken, full, out []byte, w int, slots []internSlot, shift uint, keys []span, nk int, idv, sqv []int32, ns int) {
	first, last := tok[0], tok[len(tok)-1]
	switch {
	case int(last.start)+maxPacked > len(full):
		panic(fmt.Sprintf("hser: internRun: text has %d bytes, a token at %d needs %d", len(full), last.start, maxPacked))
	case w < 0 || len(out)-w < int(last.end-first.start)+maxPacked:
		panic(fmt.Sprintf("hser: internRun: out has %d bytes past %d, %d tokens need %d", len(out)-w, w, len(tok), int(last.end-first.start)+maxPacked))
	case len(keys)-nk < len(tok) || len(sqv)-ns < len(tok) || len(idv) < len(tok):
		panic("hser: internRun: keys, sqv or idv has no room for an entry per token")
	case shift < 1 || shift > 63 || len(slots) < 1<<(64-shift):
		panic(fmt.Sprintf("hser: internRun: %d slots, shift %d", len(slots), shift))
	}
}

// internRunGo is the inner loop of internTokens: it interns tok's tokens
// in order while each is an ordinary one — a field of its own (field == 1)
// of at most maxPacked bytes — whose first probe in the slots holds its key
// or is empty, and stops at the first that is not. For each token it
// writes the lowercased bytes to out at w (16 bytes, zero-padded; the next
// token overwrites the padding), its id to idv[k] and to sqv[ns] (ns
// counts only ids of non-articles), and for a new key the slot and
// keys[nk]. It returns how many tokens it interned and the new w, nk and
// ns.
//
// internRun is this loop behind checkRun: on amd64 in assembly
// (internrun_amd64.s), elsewhere this function; it is also the tests'
// oracle for the assembly.
func internRunGo(tok []scanToken, full, out []byte, w int, slots []internSlot, shift uint, gen uint32, keys []span, nk int, idv, sqv []int32, ns int) (done, w2, nk2, ns2 int) {
	const lower = 0x2020202020202020 // [A-Z] → [a-z]; digits unchanged
	k := 0
	for ; k < len(tok); k++ {
		tk := &tok[k]
		s := int(tk.start)
		n := uint(tk.end - tk.start)
		if n > maxPacked || tk.field != 1 {
			break
		}
		m := &packMaskTab[n]
		src := (*[16]byte)(full[s:])
		lo := (binary.LittleEndian.Uint64(src[:8]) | lower) & m[0]
		hi := (binary.LittleEndian.Uint64(src[8:]) | lower) & m[1]
		dst := (*[16]byte)(out[w:])
		binary.LittleEndian.PutUint64(dst[:8], lo)
		binary.LittleEndian.PutUint64(dst[8:], hi)
		tag := gen | uint32(n)
		// The common cases — found at the first probe, or the first probe
		// is empty — without a branch between them (whether a token is new
		// is unpredictable): the slot and the key are written either way (a
		// found slot gets its own values again) and only a new key is kept.
		sl := &slots[hashPacked(lo, hi, int(n))>>shift]
		empty := b2i(sl.tag&^0xff != gen)
		found := b2i((sl.lo^lo)|(sl.hi^hi)|uint64(sl.tag^tag) == 0)
		if empty|found == 0 {
			break
		}
		id := sl.id
		if empty != 0 {
			id = int32(nk)
		}
		keys[nk] = span{int32(w), int32(w + int(n))}
		nk += empty
		*sl = internSlot{lo, hi, tag, id}
		idv[k] = id
		sqv[ns] = id
		ns += b2i(id >= articleIDs)
		w += int(n)
	}
	return k, w, nk, ns
}
