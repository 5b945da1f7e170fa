package hser

import (
	"unicode"
	"unicode/utf8"
)

// This file reproduces the SQuAD v1.1 evaluation script's normalize_answer:
//
//	lower → delete string.punctuation → re.sub(r'\b(a|an|the)\b', ' ') → ' '.join(split())
//
// with Python 3 str semantics, so EM and token F1 match the official script
// to the bit on any text:
//   - str.lower is Unicode full lowercasing: İ (U+0130) becomes "i̇", and a
//     capital sigma becomes final ς at the end of a word (Final_Sigma).
//   - only the 32 ASCII punctuation characters are deleted ("«»" and "。"
//     stay).
//   - \b is a Unicode word boundary: word characters are letters (L*),
//     numbers (N*) and '_'. Combining marks are not word characters, as in
//     Python's re.
//   - str.split splits on Unicode whitespace plus U+001C–U+001F.
// Character properties come from Go's unicode tables. Checked over every code
// point against CPython 3.11 (Unicode 14): str.lower (single characters),
// \w and whitespace agree everywhere except U+0130, handled here, and
// characters that Unicode 14 had not assigned yet. The same check shows that
// U+0130 and U+212A are the only non-ASCII characters Python lowercases into
// [a-z0-9] (see appendRougeTokens).

// ASCII character classes for normalize_answer's fast path.
const (
	asciiOther = iota
	asciiWord  // [A-Za-z0-9_]
	asciiSpace // Python whitespace: \t \n \v \f \r, U+001C–U+001F, ' '
)

var asciiClass = func() (t [utf8.RuneSelf]uint8) {
	for c := range utf8.RuneSelf {
		switch {
		case isPyWord(rune(c)):
			t[c] = asciiWord
		case isPySpace(rune(c)):
			t[c] = asciiSpace
		}
	}
	return t
}()

// isPyPunct reports Python's string.punctuation.
func isPyPunct(r rune) bool {
	switch {
	case '!' <= r && r <= '/', ':' <= r && r <= '@', '[' <= r && r <= '`', '{' <= r && r <= '~':
		return true
	}
	return false
}

// isPySpace is Python's str.isspace.
func isPySpace(r rune) bool {
	return unicode.IsSpace(r) || (0x1c <= r && r <= 0x1f)
}

// isPyWord is Python re's Unicode \w: str.isalnum() or '_'.
func isPyWord(r rune) bool {
	if r < utf8.RuneSelf {
		return 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' || r == '_'
	}
	return unicode.IsLetter(r) || unicode.IsNumber(r)
}

// isCased is Unicode's Cased property (Lowercase, Uppercase or Lt).
func isCased(r rune) bool {
	return unicode.IsUpper(r) || unicode.IsLower(r) || unicode.IsTitle(r) ||
		unicode.Is(unicode.Other_Lowercase, r) || unicode.Is(unicode.Other_Uppercase, r)
}

// isCaseIgnorable is Unicode's Case_Ignorable property: Mn, Me, Cf, Lm, Sk
// and the Word_Break classes MidLetter, MidNumLet and Single_Quote.
func isCaseIgnorable(r rune) bool {
	switch r {
	case '\'', '.', ':', '\u00B7', '\u0387', '\u055F', '\u05F4', '\u2018', '\u2019',
		'\u2024', '\u2027', '\uFE13', '\uFE52', '\uFE55', '\uFF07', '\uFF0E', '\uFF1A':
		return true
	}
	return unicode.In(r, unicode.Mn, unicode.Me, unicode.Cf, unicode.Lm, unicode.Sk)
}

// finalSigma reports whether the capital sigma at s[i:] lowercases to ς, per
// CPython's handle_capital_sigma: a cased letter before it (skipping case
// ignorables) and none after it.
func finalSigma(s string, i int) bool {
	j := i
	before := false
	for j > 0 {
		r, size := utf8.DecodeLastRuneInString(s[:j])
		j -= size
		if !isCaseIgnorable(r) {
			before = isCased(r)
			break
		}
	}
	if !before {
		return false
	}
	for k := i + len("Σ"); k < len(s); {
		r, size := utf8.DecodeRuneInString(s[k:])
		k += size
		if !isCaseIgnorable(r) {
			return !isCased(r)
		}
	}
	return true
}

// appendPyLowerNoPunct appends Python's s.lower() with ASCII punctuation
// deleted (the first two steps of normalize_answer). Invalid UTF-8 bytes
// become U+FFFD, as Python's decoder with errors="replace" would make them.
func appendPyLowerNoPunct(dst []byte, s string) []byte {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			switch {
			case 'A' <= c && c <= 'Z':
				dst = append(dst, c+('a'-'A'))
			case isPyPunct(rune(c)):
			default:
				dst = append(dst, c)
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		switch r {
		case '\u0130':
			dst = append(dst, "i\u0307"...)
		case '\u03A3':
			if finalSigma(s, i) {
				dst = utf8.AppendRune(dst, 'ς')
			} else {
				dst = utf8.AppendRune(dst, 'σ')
			}
		default:
			dst = utf8.AppendRune(dst, unicode.ToLower(r))
		}
		i += size
	}
	return dst
}

func isArticle(w []byte) bool {
	switch string(w) {
	case "a", "an", "the":
		return true
	}
	return false
}

// appendSQuADNormalized appends normalize_answer(s) to dst: tokens joined by
// single spaces, no leading or trailing space. tmp is scratch space.
func appendSQuADNormalized(dst []byte, s string, tmp *[]byte) []byte {
	if out, ok := appendSQuADNormalizedFast(dst, s); ok {
		return out
	}
	return appendSQuADNormalizedGeneral(dst, s, tmp)
}

// appendSQuADNormalizedGeneral follows the Python steps one by one.
func appendSQuADNormalizedGeneral(dst []byte, s string, tmp *[]byte) []byte {
	low := appendPyLowerNoPunct((*tmp)[:0], s)
	*tmp = low
	// Articles are whole \w runs; replacing them by ' ' and then splitting on
	// whitespace is the same as dropping them from the whitespace fields,
	// except that an article also splits the field it sits in ("x·the·y"
	// has no \w around "the", so it becomes "x· ·y" → two fields).
	sep := true // the next written byte starts a new field
	start := len(dst)
	emit := func(b []byte) {
		if sep && len(dst) > start {
			dst = append(dst, ' ')
		}
		sep = false
		dst = append(dst, b...)
	}
	for i := 0; i < len(low); {
		if c := low[i]; c < utf8.RuneSelf && asciiClass[c] != asciiWord {
			// ASCII fast path for the common case.
			if asciiClass[c] == asciiSpace {
				sep = true
			} else {
				emit(low[i : i+1])
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(low[i:])
		switch {
		case isPySpace(r):
			sep = true
			i += size
		case isPyWord(r):
			j := i + size
			for j < len(low) {
				if c := low[j]; c < utf8.RuneSelf {
					if asciiClass[c] != asciiWord {
						break
					}
					j++
					continue
				}
				r2, s2 := utf8.DecodeRune(low[j:])
				if !isPyWord(r2) {
					break
				}
				j += s2
			}
			if isArticle(low[i:j]) {
				sep = true
			} else {
				emit(low[i:j])
			}
			i = j
		default:
			emit(low[i : i+size])
			i += size
		}
	}
	return dst
}

// NormalizeAnswer is SQuAD v1.1's normalize_answer, bit-exact (see above).
func NormalizeAnswer(s string) string {
	var tmp []byte
	return string(appendSQuADNormalized(nil, s, &tmp))
}

// appendSQuADNormalizedASCII is appendSQuADNormalized for ASCII text in one
// pass (appendSQuADNormalizedFast, which never fails on ASCII).
func appendSQuADNormalizedASCII(dst []byte, s string) []byte {
	dst, _ = appendSQuADNormalizedFast(dst, s)
	return dst
}

// appendSQuADNormalizedFast is appendSQuADNormalized in one pass for text
// whose non-ASCII characters are all squadSafeRune: punctuation is skipped
// without ending a word (deleting it joins "t.h.e" into the article "the"),
// and a word run that turns out to be an article is taken back out. A safe
// non-ASCII character is Python whitespace (a field break) or, like an
// ASCII control character, a non-word character kept as it is: it ends the
// word run before it (so "the’s" loses its article, "x’the’y" splits into
// "x’" and "’y", as re's \b does) and belongs to the field. It reports
// false, with dst holding garbage past its original length, at the first
// character that is not safe (the caller then takes the general path).
func appendSQuADNormalizedFast(dst []byte, s string) ([]byte, bool) {
	sep := true
	start := len(dst)
	for i := 0; i < len(s); {
		c := s[i]
		switch squadClass[c] {
		case squadPunct:
			i++
		case squadSpace:
			sep = true
			i++
		case squadWord:
			mark := len(dst)
			if sep && len(dst) > start {
				dst = append(dst, ' ')
			}
			word := len(dst)
			for ; i < len(s); i++ {
				c := s[i]
				k := squadClass[c]
				if k == squadPunct {
					continue
				}
				if k != squadWord {
					break
				}
				dst = append(dst, c|0x20) // [A-Za-z0-9] → [a-z0-9]
			}
			if isArticle(dst[word:]) {
				dst = dst[:mark]
				sep = true
			} else {
				sep = false
			}
		default: // control characters and other non-word characters: kept, part of the field
			size := 1
			if c >= utf8.RuneSelf {
				var r rune
				r, size = utf8.DecodeRuneInString(s[i:])
				if !squadSafeRune(r) {
					return dst, false
				}
				if isPySpace(r) {
					sep = true
					i += size
					continue
				}
			}
			if sep && len(dst) > start {
				dst = append(dst, ' ')
			}
			sep = false
			dst = append(dst, s[i:i+size]...)
			i += size
		}
	}
	return dst, true
}

// squadSafeRune reports whether normalize_answer treats the non-ASCII
// character r as appendSQuADNormalizedFast assumes: not a word character
// (letter or number, so no word run continues through it and no article
// check sees it), not punctuation (string.punctuation is ASCII), and left
// unchanged by str.lower (which rules out the cased symbols Ⓐ–Ⓩ and the
// letters with special lowercasing, İ and Σ). U+FFFD is refused so that
// invalid UTF-8 (decoded as it) goes to the general path, which replaces it.
func squadSafeRune(r rune) bool {
	switch r {
	case '’', '“', '”', '–', '—', '‘', '…', '•', '\u00a0', '\u00ad', '®', '©', '°':
		return true // the common ones, without the table lookups
	}
	return r != utf8.RuneError && !unicode.IsLetter(r) && !unicode.IsNumber(r) && unicode.ToLower(r) == r
}

// squadClass classifies ASCII bytes for appendSQuADNormalizedASCII; '_' is
// punctuation (deleted before \b is evaluated), not a word character.
const (
	squadOther = iota
	squadPunct
	squadSpace
	squadWord // [A-Za-z0-9]
)

var squadClass = func() (t [256]uint8) { // 256: no bounds check on a byte
	for c := range utf8.RuneSelf {
		switch {
		case isPyPunct(rune(c)):
			t[c] = squadPunct
		case asciiClass[c] == asciiSpace:
			t[c] = squadSpace
		case asciiClass[c] == asciiWord:
			t[c] = squadWord
		}
	}
	return t
}()
