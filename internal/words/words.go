// Package words holds the harness's one definition of a "word" outside the
// reward: maximal runs of Unicode letters and digits, and the English
// stopword lists built on them. The reward's tokenizers (package hser) are
// deliberately separate: they must match rouge-score and SQuAD bit for bit.
package words

import (
	"strings"
	"unicode"
)

// notWord reports whether r separates words.
func notWord(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) }

// Fields returns the maximal runs of letters and digits of s, as they appear
// in s (case kept, so callers can see capitalization).
func Fields(s string) []string { return strings.FieldsFunc(s, notWord) }

// LowerFields returns the words of strings.ToLower(s): Fields(s), each
// lowercased (no letter or digit lowercases to a separator, checked over all
// of Unicode by the tests).
func LowerFields(s string) []string { return strings.FieldsFunc(strings.ToLower(s), notWord) }

// Normalize returns LowerFields(s) joined by single spaces: the form in
// which whole-word containment is tested. ASCII text takes a one-pass path
// that returns s itself when it is already normal.
func Normalize(s string) string {
	if b, ok := normalizeASCII(s); ok {
		return b
	}
	return strings.Join(LowerFields(s), " ")
}

// normalizeASCII is Normalize for ASCII text (false for any other text).
func normalizeASCII(s string) (string, bool) {
	normal := true
	n := 0 // length of the normalized text
	word := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 0x80:
			return "", false
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			normal = false
		default:
			if c != ' ' || !word || i+1 == len(s) || s[i+1] == ' ' {
				normal = false
			}
			if word {
				n++ // a separating space, unless it ends the text
			}
			word = false
			continue
		}
		word = true
		n++
	}
	if normal {
		return s, true
	}
	if !word && n > 0 {
		n-- // no space after the last word
	}
	b := make([]byte, 0, n)
	word = false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		default:
			word = false
			continue
		}
		if !word && len(b) > 0 {
			b = append(b, ' ')
		}
		word = true
		b = append(b, c)
	}
	return string(b), true
}
