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
	AnalyzerPlain         = "plain"
	AnalyzerEnglish       = "english"
	AnalyzerLuceneEnglish = "lucene-english"
)

// AnalyzerName identifies the plain analysis in persisted indexes, so an
// index built with one analysis is never searched with another.
const AnalyzerName = "plain-ascii-lower-v1"

const (
	analyzerEnglishID = "plain-ascii-lower-v1+snowball-english-stop-stem-v0.10.0"
	analyzerLuceneID  = "lucene9-standard-possessive-lower-stop33-porter-v1"
)

// NewAnalyzer returns the analyzer a config names ("" means plain).
func NewAnalyzer(name string) (Analyzer, error) {
	switch name {
	case "", AnalyzerPlain:
		return Analyzer{}, nil
	case AnalyzerEnglish:
		return Analyzer{kind: analyzerSnowball}, nil
	case AnalyzerLuceneEnglish:
		return Analyzer{kind: analyzerLucene}, nil
	}
	return Analyzer{}, fmt.Errorf("analyzer %q: want plain, english or lucene-english", name)
}

// analyzerByID resolves the identifier stored in an index.
func analyzerByID(id string) (Analyzer, bool) {
	switch id {
	case AnalyzerName:
		return Analyzer{}, true
	case analyzerEnglishID:
		return Analyzer{kind: analyzerSnowball}, true
	case analyzerLuceneID:
		return Analyzer{kind: analyzerLucene}, true
	}
	return Analyzer{}, false
}

// ID is the versioned identifier recorded in persisted indexes.
func (a Analyzer) ID() string {
	switch a.kind {
	case analyzerSnowball:
		return analyzerEnglishID
	case analyzerLucene:
		return analyzerLuceneID
	}
	return AnalyzerName
}

// term maps a token (a plain token, or for lucene-english one after the
// possessive and lowercase filters) to its index term; false drops it (a
// stopword).
func (a Analyzer) term(tok string) (string, bool) {
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
		if t, ok := a.term(tok); ok {
			toks = append(toks, t)
		}
	}
	if a.kind == analyzerLucene {
		forEachLuceneToken(text, func(tok []byte) { add(string(tok)) })
		return toks
	}
	forEachToken(text, func(tok []byte) { add(string(tok)) })
	return toks
}
