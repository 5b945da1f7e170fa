package retrieval

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
type Analyzer struct {
	english bool
}

// Analyzer names accepted in configs.
const (
	AnalyzerPlain   = "plain"
	AnalyzerEnglish = "english"
)

// AnalyzerName identifies the plain analysis in persisted indexes, so an
// index built with one analysis is never searched with another.
const AnalyzerName = "plain-ascii-lower-v1"

const analyzerEnglishID = "plain-ascii-lower-v1+snowball-english-stop-stem-v0.10.0"

// NewAnalyzer returns the analyzer a config names ("" means plain).
func NewAnalyzer(name string) (Analyzer, error) {
	switch name {
	case "", AnalyzerPlain:
		return Analyzer{}, nil
	case AnalyzerEnglish:
		return Analyzer{english: true}, nil
	}
	return Analyzer{}, fmt.Errorf("analyzer %q: want plain or english", name)
}

// analyzerByID resolves the identifier stored in an index.
func analyzerByID(id string) (Analyzer, bool) {
	switch id {
	case AnalyzerName:
		return Analyzer{}, true
	case analyzerEnglishID:
		return Analyzer{english: true}, true
	}
	return Analyzer{}, false
}

// ID is the versioned identifier recorded in persisted indexes.
func (a Analyzer) ID() string {
	if a.english {
		return analyzerEnglishID
	}
	return AnalyzerName
}

// term maps a plain token to its index term; false drops it (a stopword).
func (a Analyzer) term(tok string) (string, bool) {
	if !a.english {
		return tok, true
	}
	if english.IsStopWord(tok) {
		return "", false
	}
	return english.Stem(tok, false), true
}

// Tokenize returns the index terms of text, in order.
func (a Analyzer) Tokenize(text string) []string {
	var toks []string
	forEachToken(text, func(tok []byte) {
		if t, ok := a.term(string(tok)); ok {
			toks = append(toks, t)
		}
	})
	return toks
}
