package hser

import (
	"encoding/binary"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// Tokenizer names accepted by Config.Tokenizer.
const (
	TokenizerUnicode    = "unicode"
	TokenizerRougeScore = "rouge-score"
)

// asciiAlnum marks [A-Za-z0-9].
var asciiAlnum = func() (t [256]bool) {
	for c := range 256 {
		t[c] = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9'
	}
	return t
}()

// appendAlnumRun appends the run of ASCII letters and digits at text[i:],
// lowercased (c|0x20 lowercases a letter and leaves a digit as it is), and
// returns the index after it.
func appendAlnumRun(buf []byte, text string, i int) ([]byte, int) {
	for ; i < len(text) && asciiAlnum[text[i]]; i++ {
		buf = append(buf, text[i]|0x20)
	}
	return buf, i
}

// stemmer Porter-stems tokens, remembering the stems of recent words of up
// to 16 bytes in a direct-mapped memo keyed by the packed word: answers
// repeat a small vocabulary, and a lookup is much cheaper than the
// algorithm. The memo has a fixed size (a word evicts the one in its slot)
// and is allocated once, so stemming does not allocate in steady state; it
// changes the speed, never a stem.
type stemmer struct {
	buf  []byte
	memo []stemEntry
}

// stemEntry maps the word lo|hi (little-endian, zero-padded: words have no
// NUL bytes) to its stem slo|shi of n-1 bytes; n == 0 marks an empty entry.
type stemEntry struct {
	lo, hi, slo, shi uint64
	n                uint8
}

// stemMemoSize is the number of memo entries, in sets of two (a word goes
// to the first entry of its set and pushes the older one to the second):
// 8192 × 40 bytes holds the working vocabulary of typical answers.
const stemMemoSize = 1 << stemMemoBits

const stemMemoBits = 13

// stemPacked returns the stem of the lowercase ASCII word of n ≤ 16 bytes
// packed in lo and hi, packed the same way.
func (st *stemmer) stemPacked(lo, hi uint64, n int) (uint64, uint64, int) {
	if st.memo == nil {
		st.memo = make([]stemEntry, stemMemoSize)
	}
	set := st.memo[hashPacked(lo, hi, n)>>(64-stemMemoBits)&^1:][:2]
	for i := range set {
		if e := &set[i]; e.n != 0 && e.lo == lo && e.hi == hi {
			return e.slo, e.shi, int(e.n) - 1
		}
	}
	var w [16]byte
	binary.LittleEndian.PutUint64(w[:8], lo)
	binary.LittleEndian.PutUint64(w[8:], hi)
	stem := porterStem(append(st.buf[:0], w[:n]...)) // a stem is never longer than its word
	st.buf = stem
	clear(w[:])
	copy(w[:], stem)
	set[1] = set[0]
	set[0] = stemEntry{lo, hi, binary.LittleEndian.Uint64(w[:8]), binary.LittleEndian.Uint64(w[8:]), uint8(len(stem) + 1)}
	return set[0].slo, set[0].shi, len(stem)
}

// stemTail replaces buf[start:], a lowercase ASCII word, by its stem.
func (st *stemmer) stemTail(buf []byte, start int) []byte {
	word := buf[start:]
	if len(word) <= 16 {
		var w [16]byte
		copy(w[:], word)
		lo, hi, n := st.stemPacked(binary.LittleEndian.Uint64(w[:8]), binary.LittleEndian.Uint64(w[8:]), len(word))
		binary.LittleEndian.PutUint64(w[:8], lo)
		binary.LittleEndian.PutUint64(w[8:], hi)
		return append(buf[:start], w[:n]...)
	}
	stem := porterStem(append(st.buf[:0], word...))
	st.buf = stem
	return append(buf[:start], stem...)
}

// span is a token: bytes [start, end) of a scratch buffer.
type span struct{ start, end int32 }

// appendRougeTokens appends the tokens of Google rouge-score's default
// tokenizer to buf and their spans to spans:
//
//	text.lower(); every run of characters outside [a-z0-9] → " "; split;
//	with stemming, NLTK Porter on tokens longer than 3 characters; drop
//	tokens that are not [a-z0-9]+.
//
// Python's str.lower maps exactly three kinds of non-[a-z0-9] characters into
// [a-z0-9]: A–Z, KELVIN SIGN U+212A → "k", and U+0130 (İ) → "i" followed by
// U+0307, which is not alphanumeric and so ends the token. Everything else
// outside ASCII, including invalid UTF-8, separates tokens — which is why this
// tokenizer scores any CJK text 0.
func appendRougeTokens(buf []byte, spans []span, text string, stem bool, st *stemmer) ([]byte, []span) {
	start := len(buf)
	flush := func() {
		if len(buf) > start {
			if stem && len(buf)-start > 3 {
				buf = st.stemTail(buf, start)
			}
			if len(buf) > start { // a stem is never empty, but rouge-score filters anyway
				spans = append(spans, span{int32(start), int32(len(buf))})
			}
		}
		start = len(buf)
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			if !asciiAlnum[c] {
				flush()
				i++
				continue
			}
			buf, i = appendAlnumRun(buf, text, i)
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		switch r {
		case '\u212A': // KELVIN SIGN lowercases to ASCII k
			buf = append(buf, 'k')
		case '\u0130': // İ lowercases to i + U+0307 (a separator)
			buf = append(buf, 'i')
			flush()
		default:
			flush()
		}
	}
	flush()
	return buf, spans
}

// isSplitRune reports the scripts whose letters are tokens of their own:
// Han ideographs, hiragana, katakana and hangul.
func isSplitRune(r rune) bool {
	return unicode.In(r, unicode.Han, unicode.Hiragana, unicode.Katakana, unicode.Hangul)
}

// foldRune is simple case folding computed as lower(upper(r)): ς and σ, ſ
// and s, K (KELVIN SIGN) and k fold together; ß stays ß (no full folding).
func foldRune(r rune) rune {
	return unicode.ToLower(unicode.ToUpper(r))
}

// appendUnicodeTokens appends the tokens of the unicode tokenizer to buf and
// their spans to spans. The tokenizer, exactly:
//
//  1. Text that is not in Unicode NFC is converted to NFC, so a precomposed
//     and a decomposed é are the same token.
//  2. Han ideographs, hiragana, katakana and hangul characters (by Unicode
//     script) are each a token of their own, since those scripts do not put
//     spaces between words.
//  3. Otherwise a token is a maximal run of letters (L*) and numbers (N*) in
//     any script; combining marks (M*) directly after a token's character
//     belong to that token (accents and Indic vowel signs are kept), and a
//     mark with no token before it is dropped.
//  4. Everything else — spaces, punctuation, symbols, '_', control
//     characters and invalid UTF-8 — separates tokens.
//  5. Each character is case-folded with simple case folding
//     (lower(upper(r))); accents are not removed, so "café" ≠ "cafe".
//
// With stem, tokens made only of ASCII letters and digits that are longer
// than 3 bytes are Porter-stemmed as in rouge-score.
//
// Not done: compatibility (NFKC) folding, so fullwidth "ＡＢＣ" is not
// "abc"; and word segmentation, so Thai, Lao, Khmer or Myanmar text without
// spaces comes out as long runs.
func appendUnicodeTokens(buf []byte, spans []span, text string, stem bool, st *stemmer) ([]byte, []span) {
	if !isASCII(text) && !norm.NFC.IsNormalString(text) {
		text = norm.NFC.String(text)
	}
	start := len(buf)
	ascii := true // the current token is ASCII only
	inSplit := false
	flush := func() {
		if len(buf) > start {
			if stem && ascii && len(buf)-start > 3 {
				buf = st.stemTail(buf, start)
			}
			spans = append(spans, span{int32(start), int32(len(buf))})
		}
		start = len(buf)
		ascii = true
		inSplit = false
	}
	for i := 0; i < len(text); {
		c := text[i]
		if c < utf8.RuneSelf {
			if !asciiAlnum[c] {
				flush()
				i++
				continue
			}
			if inSplit {
				flush()
			}
			buf, i = appendAlnumRun(buf, text, i)
			continue
		}
		r, size := utf8.DecodeRuneInString(text[i:])
		i += size
		switch {
		case r == utf8.RuneError && size == 1:
			flush()
		case unicode.IsMark(r):
			if len(buf) > start { // attach to the token in progress
				buf = utf8.AppendRune(buf, r)
				ascii = false
			}
		case isSplitRune(r) && (unicode.IsLetter(r) || unicode.IsNumber(r)):
			flush()
			buf = utf8.AppendRune(buf, foldRune(r))
			ascii = false
			inSplit = true // ends at the next letter, number or separator
		case unicode.IsLetter(r) || unicode.IsNumber(r):
			if inSplit {
				flush()
			}
			buf = utf8.AppendRune(buf, foldRune(r))
			ascii = false
		default:
			flush()
		}
	}
	flush()
	return buf, spans
}

func isASCII(s string) bool {
	i := 0
	for ; i+8 <= len(s); i += 8 {
		// Eight bytes at a time: any high bit set means a non-ASCII byte.
		x := uint64(s[i]) | uint64(s[i+1])<<8 | uint64(s[i+2])<<16 | uint64(s[i+3])<<24 |
			uint64(s[i+4])<<32 | uint64(s[i+5])<<40 | uint64(s[i+6])<<48 | uint64(s[i+7])<<56
		if x&0x8080808080808080 != 0 {
			return false
		}
	}
	for ; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
