package hser

import (
	"encoding/binary"
	"math/bits"
	"slices"
	"unicode/utf8"
)

// asciiScan is the fast path's per-token working memory. The path runs as
// two short loops — find the tokens (scan), then pack, hash and intern them
// (internRun, under internTokens) — rather than one loop doing everything,
// and neither branches on data except to leave (rare cases are handled
// outside the loops, which they break out of). Even so Go spills most of
// the second loop's values to the stack, so on amd64 it is assembly.
type asciiScan struct {
	tok []scanToken
	// Fields holding a non-ASCII character that SQuAD keeps (xfields,
	// spans of the text, in order; see blankText) and the original text
	// they are normalized from: pred and ref, ref starting at split.
	xf        []span
	xi        int   // the next xfield to intern
	xlim      int32 // the side being interned ends before this offset
	pred, ref string
	split     int32
	xpos      []int32 // blankText's scratch
	tmp       []byte  // the general normalizer's
}

// xNormMax bounds the growth of a text by normalize_answer: lowercasing
// makes at most 3 bytes of 1 (an invalid byte becomes U+FFFD; 'Ⱥ', 2
// bytes, lowercases to 'ⱥ', 3).
const xNormMax = 3

// xGrowMax bounds the bytes an xfield's tokens and normalized text take in
// the fast path's buffer per byte of the field: case folding makes at most
// 3 bytes of 2 (Ⱥ → ⱥ), plus xNormMax.
const xGrowMax = 2 + xNormMax

// markXFields sets xField on the first of the tokens at or after the
// start of each xfield.
func (a *asciiScan) markXFields(tokens int) {
	tok := a.tok[:tokens]
	k := 0
	for _, f := range a.xf {
		for k < len(tok) && tok[k].start < f.start {
			k++
		}
		if k < len(tok) {
			tok[k].field |= xField
		}
	}
}

// scanToken is one token of the fast path.
type scanToken struct {
	start, end int32  // offsets in the text
	field      uint32 // 1 when whitespace lies between it and the token before
}

// scanSep is the byte fillText puts between the prediction and the
// reference and after them: whitespace for every tokenizer, so no token
// runs from one side into the other and the last one is closed.
const scanSep = ' '

// fillText sets dst to pred, scanSep, ref, followed by textSlack bytes of
// scanSep within its capacity, and returns it and where ref starts.
func fillText(dst []byte, pred, ref string) ([]byte, int) {
	dst = append(append(append(dst[:0], pred...), scanSep), ref...)
	return padText(dst), len(pred) + 1
}

// padText makes the textSlack bytes past len(text) scanSep.
func padText(text []byte) []byte {
	n := len(text)
	text = slices.Grow(text, textSlack)
	copy(text[n:n+textSlack], sepPad[:]) // one block copy, not a byte loop
	return text
}

// sepPad is textSlack bytes of scanSep.
var sepPad = func() (p [textSlack]byte) {
	for i := range p {
		p[i] = scanSep
	}
	return p
}()

// tokensBefore is the number of tokens that start before at: tok is in
// text order (slices.BinarySearchFunc, without its call per probe).
func tokensBefore(tok []scanToken, at int32) int {
	lo, hi := 0, len(tok)
	for lo < hi {
		mid := int(uint(lo+hi) >> 1)
		if tok[mid].start < at {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	return lo
}

// scanGo (scan) finds the tokens of text — runs of ASCII letters and digits — and
// for each whether whitespace (Python's, on ASCII: \t \n \v \f \r,
// U+001C–U+001F, ' ') separates it from the one before. text must be
// followed by textSlack bytes of scanSep (padText). It returns the number of
// tokens, false for ascii (and nothing useful) if text is not ASCII, and
// whether text may hold an ASCII control character other than whitespace
// (the SQuAD normalization keeps those: the caller checks exactly with
// hasControl).
//
// A 64-byte block is classified eight bytes at a time into bit masks (bit i
// for byte i): letters and digits (alnumBits), and bytes ≤ ' '. Token starts
// and ends are the mask's 0→1 and 1→0 edges. Whether a gap between two
// tokens holds a space is one addition over the whole text: the gaps are the
// runs of ones of ^alnum; adding the space bits (a subset of them) carries
// out of a run, into the next token's first bit, exactly when the run holds
// a space (a run of L ones is 2^L-1; adding s with 0 < s < 2^L overflows it,
// and nothing carries into a run, since the bit before it is a token's, 0
// in both). Control characters are bytes < ' ' or 0x7f; ≤ ' ' counts as
// whitespace only when there are none.
//
// scanGo is scan in Go; on amd64 scan is assembly (scan_amd64.s, SSE2
// for the classification), and scanGo its tests' oracle.
func (a *asciiScan) scanGo(text []byte) (tokens int, ascii, control bool) {
	n := len(text)
	full := text[:n+textSlack]
	a.tok = resize(a.tok, n/2+1) // tokens are separated by at least one byte
	tok := a.tok
	var low uint64 = ^uint64(0) // a high bit clear: some byte < ' '
	var ctl uint64              // a high bit set: some 0x7f
	var carryAl, carrySp uint64 // the last byte of the previous block is alnum; the gap addition's carry
	k, j := 0, 0
	// base runs one block past the text when its length is a multiple of
	// 64, so that a token ending the text is closed by the slack.
	for base := 0; base <= n; base += 64 {
		al, sp, lw, del, ok := classify((*[64]byte)(full[base : base+64]))
		if !ok {
			return 0, false, false
		}
		low &= lw
		ctl |= del
		prev := al<<1 | carryAl
		carryAl = al >> 63
		starts, ends := al&^prev, prev&^al
		var gapSp uint64
		gapSp, carrySp = bits.Add64(^al, sp, carrySp)
		for starts != 0 {
			i := bits.TrailingZeros64(starts)
			t := &tok[k]
			t.start = int32(base + i)
			t.field = uint32(gapSp>>uint(i)) & 1
			k++
			starts &= starts - 1
		}
		for ends != 0 {
			tok[j].end = int32(base + bits.TrailingZeros64(ends))
			j++
			ends &= ends - 1
		}
	}
	const high = 0x8080808080808080
	return k, true, low&high != high || ctl&high != 0
}

// classify returns the bit masks of the ASCII letters and digits and of the
// bytes ≤ ' ' of blk, the AND of x + (0x80-' ') over its words x (a byte <
// ' ' clears a high bit) and their OR of x+1 (0x7f sets one), and false for
// ok if blk is not ASCII (then the rest is meaningless).
func classify(blk *[64]byte) (al, sp, low, del uint64, ok bool) {
	const ones, high = 0x0101010101010101, 0x8080808080808080
	low = ^uint64(0)
	var or uint64
	// Per byte (ASCII), the high bit of x + (0x80-c) is set iff the byte
	// is ≥ c.
	word := func(x uint64) (al, sp uint64) {
		or |= x
		low &= x + ones*(0x80-' ')
		del |= x + ones
		return alnumBits(x), (high &^ (x + ones*(0x80-'!'))) * 0x0002040810204081 >> 56
	}
	var a, s uint64
	a, s = word(binary.LittleEndian.Uint64(blk[0:]))
	al, sp = a, s
	a, s = word(binary.LittleEndian.Uint64(blk[8:]))
	al, sp = al|a<<8, sp|s<<8
	a, s = word(binary.LittleEndian.Uint64(blk[16:]))
	al, sp = al|a<<16, sp|s<<16
	a, s = word(binary.LittleEndian.Uint64(blk[24:]))
	al, sp = al|a<<24, sp|s<<24
	a, s = word(binary.LittleEndian.Uint64(blk[32:]))
	al, sp = al|a<<32, sp|s<<32
	a, s = word(binary.LittleEndian.Uint64(blk[40:]))
	al, sp = al|a<<40, sp|s<<40
	a, s = word(binary.LittleEndian.Uint64(blk[48:]))
	al, sp = al|a<<48, sp|s<<48
	a, s = word(binary.LittleEndian.Uint64(blk[56:]))
	al, sp = al|a<<56, sp|s<<56
	return al, sp, low, del, or&high == 0
}

// hasControl reports whether ASCII text holds a byte that SQuAD's
// normalization neither deletes (punctuation) nor splits on (whitespace)
// outside tokens: an ASCII control character.
func hasControl(text []byte) bool {
	for _, c := range text {
		if squadClass[c] == squadOther {
			return true
		}
	}
	return false
}

// internTokens interns tokens [from, to) of the last scan of text, one
// side: it appends their ids to ids, their lowercased bytes to buf (back to
// back; t.keys[id] is the span of an id's first occurrence there), and the
// ids of the side's SQuAD tokens to sq: one per field (tokens not separated
// by whitespace), the token's id for a field of one token, that of the
// concatenation of its tokens' bytes for a longer one, articles (ids below
// articleIDs) left out. buf must have room for all of text's tokens plus
// 2*maxPacked bytes (growBuf), and the table for their ids and one per
// field of several tokens (reset).
//
// A token of at most maxPacked bytes is its own key (two little-endian
// words, zero-padded) and is interned by internRun; a longer one, one
// whose first probe holds another key, or one that continues a field,
// stops internRun and goes to internSlow.
func (t *internTable) internTokens(ids, sq []int32, a *asciiScan, text, buf []byte, from, to int) ([]int32, []int32, []byte) {
	tok := a.tok[from:to]
	if len(tok) == 0 && (a.xi == len(a.xf) || a.xf[a.xi].start >= a.xlim) {
		return ids, sq, buf
	}
	if len(tok) > 0 {
		tok[0].field |= 1 // a side starts a field
	}
	d, ns := len(ids), len(sq)
	ids, sq = slices.Grow(ids, len(tok)), slices.Grow(sq, len(tok))
	idv, sqv := ids[d:d+len(tok)], sq[:cap(sq)]
	full := text[:cap(text)]
	out := buf[:cap(buf)]
	w := len(buf)
	for k := 0; k < len(tok); {
		// The ordinary tokens, in a loop of their own (internRun).
		keys := slices.Grow(t.keys, len(tok)-k)
		keys = keys[:cap(keys)]
		nk := len(t.keys)
		var done int
		done, w, nk, ns = internRun(tok[k:], full, out, w, t.slots, t.shift, t.gen<<8, keys, nk, idv[k:], sqv, ns)
		k += done
		t.keys = keys[:nk]
		if k == len(tok) {
			break
		}
		// A rare case: the token, and if it continues a field the rest of
		// the field.
		tk := &tok[k]
		if tk.field&xField != 0 {
			// The xfields up to this token, with the tokens in them.
			k0 := k
			k, w, sq = t.internXFields(a, idv, k, tok, text, out, w, sq[:ns], tk.start+1)
			ns = len(sq)
			sq = slices.Grow(sq, len(tok)-k) // room for one id per token left, as above
			sqv = sq[:cap(sq)]
			if k == k0 { // the token follows an xfield: an ordinary one
				tk.field &^= xField
			}
			continue
		}
		if tk.field != 0 {
			idv[k], w = t.internSlow(text, out, w, tk)
			sqv[ns] = idv[k]
			ns += b2i(idv[k] >= articleIDs)
			k++
			continue
		}
		// Token k-1 started the field, and its id was written to sq.
		prev := &tok[k-1]
		fieldW := w - int(prev.end-prev.start)
		ns -= b2i(idv[k-1] >= articleIDs)
		for ; k < len(tok) && tok[k].field == 0; k++ {
			idv[k], w = t.internSlow(text, out, w, &tok[k])
		}
		var one [1]int32
		id := t.intern(one[:0], out, []span{{int32(fieldW), int32(w)}})[0]
		sqv[ns] = id
		ns += b2i(id >= articleIDs)
	}
	if a.xi < len(a.xf) && a.xf[a.xi].start < a.xlim { // xfields after the side's last token
		_, w, sq = t.internXFields(a, idv, len(tok), tok, text, out, w, sq[:ns], a.xlim)
		ns = len(sq)
	}
	t.n = len(t.keys)
	return ids[:d+len(tok)], sq[:ns], out[:w]
}

// xField marks, in scanToken.field, the first token at or after the start
// of an xfield: internTokens leaves its loop there.
const xField = 2

// internXFields interns the xfields that start before limit, from a.xi
// on, with tok[k:]'s tokens that lie in them (their Rouge ids go to
// idv), and returns the next token, the new end of out and sq with the
// xfields' SQuAD ids appended: those of normalize_answer of the field's
// original text (one field may give several, split by an article).
func (t *internTable) internXFields(a *asciiScan, idv []int32, k int, tok []scanToken, text, out []byte, w int, sq []int32, limit int32) (int, int, []int32) {
	for ; a.xi < len(a.xf) && a.xf[a.xi].start < limit; a.xi++ {
		f := a.xf[a.xi]
		orig, off := a.pred, 0
		if f.start >= a.split {
			orig, off = a.ref, int(a.split)
		}
		s, e := int(f.start)-off, int(f.end)-off
		if cap(out)-w < xGrowMax*(e-s)+packSlack { // fastRouge grows buf for every xfield
			panic("hser: no room for an xfield's tokens and normalized text")
		}
		for ; k < len(tok) && tok[k].start < f.end; k++ {
			tk := &tok[k]
			if c := orig[int(tk.start)-off : int(tk.end)-off]; asciiPrefix(c) < len(c) {
				idv[k], w = t.internFolded(out, w, c)
				continue
			}
			idv[k], w = t.internSlow(text, out, w, tk)
		}
		// In place: out has room.
		norm, ok := appendSQuADNormalizedFast(out[w:w], orig[s:e])
		if !ok {
			norm = appendSQuADNormalizedGeneral(out[w:w], orig[s:e], &a.tmp)
		}
		for i := 0; i < len(norm); {
			j := i
			for j < len(norm) && norm[j] != ' ' {
				j++
			}
			var one [1]int32
			id := t.intern(one[:0], out, []span{{int32(w + i), int32(w + j)}})[0]
			if id >= articleIDs {
				sq = append(sq, id)
			}
			i = j + 1
		}
		w += len(norm)
	}
	return k, w, sq
}

// internFolded interns the unicode token c (ASCII letters and digits and
// keptLetter characters) case-folded as appendUnicodeTokens folds it, its
// bytes written to out at w; it returns its id and the new end of out.
func (t *internTable) internFolded(out []byte, w int, c string) (int32, int) {
	start := w
	for i := 0; i < len(c); {
		if b := c[i]; b < utf8.RuneSelf {
			out[w] = b | 0x20 // [A-Z] → [a-z], digits unchanged
			w++
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(c[i:])
		w += utf8.EncodeRune(out[w:], foldRune(r))
		i += size
	}
	sp := [1]span{{int32(start), int32(w)}}
	var one [1]int32
	return t.intern(one[:0], out, sp[:])[0], w
}

// internSlow interns token tk of text by the general lookup, its bytes
// appended to out at w; it returns its id and the new end of out.
func (t *internTable) internSlow(text, out []byte, w int, tk *scanToken) (int32, int) {
	const lower = 0x2020202020202020
	full := text[:cap(text)]
	s, n := int(tk.start), int(tk.end-tk.start)
	for i := 0; i < n; i += 8 {
		binary.LittleEndian.PutUint64(out[w+i:], binary.LittleEndian.Uint64(full[s+i:])|lower)
	}
	var lo, hi, h uint64
	if n <= maxPacked {
		ml, mh := packMasks(n)
		lo = binary.LittleEndian.Uint64(out[w:]) & ml
		hi = binary.LittleEndian.Uint64(out[w+8:]) & mh
		h = hashPacked(lo, hi, n)
	} else {
		h = hashToken(out[w : w+n])
		lo = h
	}
	t.keys = slices.Grow(t.keys, 1)
	return t.lookup(out, span{int32(w), int32(w + n)}, lo, hi, h), w + n
}

// growBuf empties buf and gives it room for the tokens of text and the
// slack internTokens writes.
func growBuf(buf, text []byte) []byte {
	return slices.Grow(buf[:0], len(text)+2*maxPacked)
}
