package embedding

// Truncation to sentence-transformers' max_seq_length, done before the text
// reaches Ollama.
//
// Why: Ollama v0.6.5 truncates an /api/embed input to num_ctx tokens not
// counting [CLS] and [SEP], then its runner cuts the two extra tokens from
// the front of the text, so a text longer than the window is embedded from
// another window than sentence-transformers' (which keeps the first
// max_seq_length − 2 word pieces). Cutting the text here, at the end of the
// last whole word that fits, gives Ollama a text it embeds whole, and the
// same window as sentence-transformers up to the pieces of one split word.
// The vocabulary comes from the served model (tokenizer.ggml.tokens), so it
// is the one Ollama tokenizes with.

import (
	"strings"
	"unicode"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"
)

// wordPiece counts BERT uncased word pieces (HF BertNormalizer with
// lowercase and accent stripping, BertPreTokenizer, WordPiece with "##"
// continuations and 100 characters at most per word).
// maxWordChars is WordPiece's max_input_chars_per_word: a longer word is [UNK].
const maxWordChars = 100

type wordPiece struct {
	vocab map[string]struct{} // word-initial pieces as is, continuations with "##"
}

// newWordPieceFromGGUF rebuilds the WordPiece vocabulary from Ollama's
// converted tokens: "▁x" was the word-initial piece x, "[x]" a special
// token, anything else the continuation "##x".
func newWordPieceFromGGUF(tokens []string) *wordPiece {
	w := &wordPiece{vocab: make(map[string]struct{}, len(tokens))}
	for _, t := range tokens {
		switch {
		case strings.HasPrefix(t, "[") && strings.HasSuffix(t, "]"):
			w.vocab[t] = struct{}{}
		case strings.HasPrefix(t, "\u2581"):
			w.vocab[strings.TrimPrefix(t, "\u2581")] = struct{}{}
		default:
			w.vocab["##"+t] = struct{}{}
		}
	}
	return w
}

// pieces is the number of word pieces of one pre-token (already lowercased
// and accent-stripped): [UNK] counts 1.
func (w *wordPiece) pieces(word string) int {
	r := []rune(word)
	if len(r) > maxWordChars {
		return 1
	}
	n := 0
	for start := 0; start < len(r); {
		end := len(r)
		for ; end > start; end-- {
			s := string(r[start:end])
			if start > 0 {
				s = "##" + s
			}
			if _, ok := w.vocab[s]; ok {
				break
			}
		}
		if end == start {
			return 1 // no piece matches: the whole word is [UNK]
		}
		n++
		start = end
	}
	return n
}

// prepare returns the longest prefix of text, cut at the end of a whole
// pre-token, whose word pieces number at most max, with every word of more
// than 100 characters replaced by "[UNK]", and its piece count.
// (sentence-transformers' tokenizer makes such a word one [UNK]; Ollama's
// would split it into pieces, but reads the literal "[UNK]" as that token.)
func (w *wordPiece) prepare(text string, max int) (string, int) {
	total := 0
	wordStart := -1
	var word strings.Builder
	var unk [][2]int // byte spans of the words that become [UNK]
	// flush counts the pending word ending at byte end; false when it does not fit.
	flush := func(end int) bool {
		if wordStart < 0 {
			return true
		}
		nw := normalizeWord(word.String())
		n := w.pieces(nw)
		word.Reset()
		if total+n > max {
			return false
		}
		if utf8.RuneCountInString(nw) > maxWordChars {
			unk = append(unk, [2]int{wordStart, end})
		}
		total += n
		wordStart = -1
		return true
	}
	cut := len(text)
	for i, r := range text {
		switch {
		case r == 0 || r == unicode.ReplacementChar || isControl(r):
			continue // removed by clean_text
		case isBertSpace(r):
			if !flush(i) {
				cut = wordStart
			}
		case isBertPunct(r) || isCJK(r):
			if !flush(i) {
				cut = wordStart
				break
			}
			wordStart = i
			word.WriteRune(r)
			if !flush(i + utf8.RuneLen(r)) {
				cut = wordStart
			}
		default:
			if wordStart < 0 {
				wordStart = i
			}
			word.WriteRune(r)
		}
		if cut < len(text) {
			break
		}
	}
	if cut == len(text) && !flush(len(text)) {
		cut = wordStart
	}
	if len(unk) == 0 {
		return text[:cut], total
	}
	var b strings.Builder
	last := 0
	for _, sp := range unk {
		b.WriteString(text[last:sp[0]])
		b.WriteString("[UNK]")
		last = sp[1]
	}
	b.WriteString(text[last:cut])
	return b.String(), total
}

// normalizeWord lowercases and strips accents (NFD, drop nonspacing marks),
// as BertNormalizer does for an uncased model.
func normalizeWord(s string) string {
	d := norm.NFD.String(strings.ToLower(s))
	var b strings.Builder
	for _, r := range d {
		if !unicode.Is(unicode.Mn, r) {
			b.WriteRune(r)
		}
	}
	return b.String()
}

func isBertSpace(r rune) bool { return unicode.IsSpace(r) || unicode.Is(unicode.Zs, r) }

// isControl is HF's is_control: the "other" categories but tab, newline
// and carriage return (which are whitespace).
func isControl(r rune) bool {
	if unicode.IsSpace(r) {
		return false
	}
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Co, unicode.Cs) || !unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C)
}

func isBertPunct(r rune) bool {
	if (r >= 33 && r <= 47) || (r >= 58 && r <= 64) || (r >= 91 && r <= 96) || (r >= 123 && r <= 126) {
		return true
	}
	return unicode.IsPunct(r)
}

func isCJK(r rune) bool {
	return (r >= 0x4E00 && r <= 0x9FFF) || (r >= 0x3400 && r <= 0x4DBF) || (r >= 0x20000 && r <= 0x2A6DF) ||
		(r >= 0x2A700 && r <= 0x2B73F) || (r >= 0x2B740 && r <= 0x2B81F) || (r >= 0x2B820 && r <= 0x2CEAF) ||
		(r >= 0xF900 && r <= 0xFAFF) || (r >= 0x2F800 && r <= 0x2FA1F)
}
