// Package analysis turns text into index terms: the analyzers a BM25 index
// is built and searched with ("plain", "english", "lucene-english") and the
// plain tokenizer the hashing and LSA embedders share with them. An
// analyzer's ID is recorded in persisted indexes, so an index is never
// searched with another analysis than it was built with.
package analysis

import (
	"fmt"

	"github.com/kljensen/snowball/english"
)

// Analyzer turns text into index terms. The zero value is the default
// ("plain"): exactly the tokenization of the shared reference numbers —
// lowercase runs of [a-z0-9], everything else a separator, no stemming, no
// stopwords. Keeping it byte-level (ASCII only) is deliberate: it is what the
// reference BM25 numbers used, and it is trivially deterministic.
//
// "english" applies, on top of the plain tokens, the Snowball English
// stopword list and stemmer (github.com/kljensen/snowball).
//
// "lucene-english" is Pyserini's default analyzer (Anserini's
// DefaultEnglishAnalyzer): Lucene's StandardTokenizer, EnglishPossessive-
// Filter, LowerCaseFilter, StopFilter with Lucene's English stopwords and
// PorterStemFilter (see luceneTokens, lucenePorter).
type Analyzer struct {
	kind uint8
}

const (
	analyzerPlain uint8 = iota
	analyzerSnowball
	analyzerLucene
)

// Analyzer names accepted in configs.
const (
	Plain         = "plain"
	English       = "english"
	LuceneEnglish = "lucene-english"
)

// The identifiers recorded in persisted indexes, so an index built with one
// analysis is never searched with another.
const (
	plainID   = "plain-ascii-lower-v1"
	englishID = "plain-ascii-lower-v1+snowball-english-stop-stem-v0.10.0"
	luceneID  = "lucene9-standard-possessive-lower-stop33-porter-v1"
)

// New returns the analyzer a config names ("" means plain).
func New(name string) (Analyzer, error) {
	switch name {
	case "", Plain:
		return Analyzer{}, nil
	case English:
		return Analyzer{kind: analyzerSnowball}, nil
	case LuceneEnglish:
		return Analyzer{kind: analyzerLucene}, nil
	}
	return Analyzer{}, fmt.Errorf("analyzer %q: want plain, english or lucene-english", name)
}

// ByID resolves the identifier stored in an index.
func ByID(id string) (Analyzer, bool) {
	switch id {
	case plainID:
		return Analyzer{}, true
	case englishID:
		return Analyzer{kind: analyzerSnowball}, true
	case luceneID:
		return Analyzer{kind: analyzerLucene}, true
	}
	return Analyzer{}, false
}

// ID is the versioned identifier recorded in persisted indexes.
func (a Analyzer) ID() string {
	switch a.kind {
	case analyzerSnowball:
		return englishID
	case analyzerLucene:
		return luceneID
	}
	return plainID
}

// IsPlain reports whether a is the plain analyzer, whose tokens are its
// terms (an index may cut and look them up without allocating).
func (a Analyzer) IsPlain() bool { return a.kind == analyzerPlain }

// IsLucene reports whether a cuts tokens with Lucene's StandardTokenizer
// (ForEachLuceneToken) rather than ForEachPlainToken.
func (a Analyzer) IsLucene() bool { return a.kind == analyzerLucene }

// Term maps a token (a plain token, or for lucene-english one after the
// possessive and lowercase filters) to its index term; false drops it (a
// stopword).
func (a Analyzer) Term(tok string) (string, bool) {
	switch a.kind {
	case analyzerSnowball:
		if english.IsStopWord(tok) {
			return "", false
		}
		return english.Stem(tok, false), true
	case analyzerLucene:
		return luceneTerm(tok)
	}
	return tok, true
}

// Tokenize returns the index terms of text, in order.
func (a Analyzer) Tokenize(text string) []string {
	var toks []string
	add := func(tok string) {
		if t, ok := a.Term(tok); ok {
			toks = append(toks, t)
		}
	}
	if a.kind == analyzerLucene {
		ForEachLuceneToken(text, func(tok []byte) { add(string(tok)) })
		return toks
	}
	ForEachPlainToken(text, func(tok []byte) { add(string(tok)) })
	return toks
}

// ForEachPlainToken calls fn with each lowercase [a-z0-9]+ run of text (the
// plain analyzer, without allocating per token) and returns the token count.
// The slice passed to fn is reused.
func ForEachPlainToken(text string, fn func(tok []byte)) int {
	var buf [64]byte
	tok := buf[:0]
	n := 0
	for i := 0; i <= len(text); i++ {
		var c byte
		if i < len(text) {
			c = text[i]
		}
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
			tok = append(tok, c)
			continue
		case c >= 'A' && c <= 'Z':
			tok = append(tok, c+'a'-'A')
			continue
		}
		if len(tok) > 0 {
			fn(tok)
			n++
			tok = tok[:0]
		}
	}
	return n
}
