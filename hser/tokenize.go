package hser

import (
	"bytes"
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
// to 16 bytes: answers repeat a small vocabulary, and a lookup is much cheaper
// than the algorithm. The memo is bounded (cleared when full) and keeps its
// storage, so it does not allocate in steady state.
type stemmer struct {
	buf  []byte
	memo map[[16]byte][16]byte
}

const stemMemoMax = 4096

// stemTail replaces buf[start:], a lowercase ASCII word, by its stem.
func (st *stemmer) stemTail(buf []byte, start int) []byte {
	w := buf[start:]
	var key [16]byte
	memo := len(w) <= len(key)
	if memo {
		copy(key[:], w) // words have no NUL bytes: the zero padding ends them
		if v, ok := st.memo[key]; ok {
			n := bytes.IndexByte(v[:], 0)
			if n < 0 {
				n = len(v)
			}
			return append(buf[:start], v[:n]...)
		}
	}
	stem := porterStem(append(st.buf[:0], w...))
	st.buf = stem
	if memo { // a stem is never longer than its word
		if st.memo == nil {
			st.memo = make(map[[16]byte][16]byte, stemMemoMax)
		}
		if len(st.memo) >= stemMemoMax {
			clear(st.memo)
		}
		var v [16]byte
		copy(v[:], stem)
		st.memo[key] = v
	}
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
