package analysis

import (
	"unicode"
	"unicode/utf16"
	"unicode/utf8"
)

// luceneStopWords is Lucene's EnglishAnalyzer.ENGLISH_STOP_WORDS_SET, the
// stopwords of Anserini's DefaultEnglishAnalyzer.
var luceneStopWords = map[string]bool{
	"a": true, "an": true, "and": true, "are": true, "as": true, "at": true, "be": true, "but": true,
	"by": true, "for": true, "if": true, "in": true, "into": true, "is": true, "it": true, "no": true,
	"not": true, "of": true, "on": true, "or": true, "such": true, "that": true, "the": true,
	"their": true, "then": true, "there": true, "these": true, "they": true, "this": true, "to": true,
	"was": true, "will": true, "with": true,
}

// ForEachLuceneToken calls fn with each StandardTokenizer token of text after
// EnglishPossessiveFilter (a trailing 's, ’s or ＇s removed, S too) and
// LowerCaseFilter (Character.toLowerCase per code point). The slice passed
// to fn is reused.
func ForEachLuceneToken(text string, fn func(tok []byte)) {
	var buf []byte
	luceneTokens(text, func(tok []rune) {
		if n := len(tok); n >= 2 && (tok[n-2] == '\'' || tok[n-2] == '\u2019' || tok[n-2] == '\uFF07') &&
			(tok[n-1] == 's' || tok[n-1] == 'S') {
			tok = tok[:n-2]
		}
		buf = buf[:0]
		for _, r := range tok {
			buf = utf8.AppendRune(buf, unicode.ToLower(r))
		}
		fn(buf)
	})
}

// luceneTerm applies StopFilter and PorterStemFilter to a lowercased token.
func luceneTerm(tok string) (string, bool) {
	if luceneStopWords[tok] {
		return "", false
	}
	var s lucenePorter
	return string(utf16.Decode(s.stem(utf16.Encode([]rune(tok))))), true
}
