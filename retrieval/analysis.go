package retrieval

// Analyzer turns text into index terms. The default ("plain") is exactly the
// tokenization of the shared reference numbers: lowercase runs of [a-z0-9],
// everything else a separator, no stemming, no stopwords. Keeping it byte-level
// (ASCII only) is deliberate: it is what the reference BM25 numbers used, and
// it makes the analyzer trivially deterministic across platforms.
type Analyzer struct{}

// AnalyzerName identifies the analysis in persisted indexes, so an index built
// with one analysis is never searched with another.
const AnalyzerName = "plain-ascii-lower-v1"

// Tokenize returns the lowercase [a-z0-9] runs of text, in order.
func (Analyzer) Tokenize(text string) []string {
	var toks []string
	forEachToken(text, func(tok []byte) { toks = append(toks, string(tok)) })
	return toks
}
