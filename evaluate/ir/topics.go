package ir

// Pyserini/Anserini TSV topics (qid<TAB>query) as the queries of a TREC run;
// a queries line that cannot be read says the formats wanted.

import (
	"bytes"
	"fmt"
	"path/filepath"
	"strings"
	"unicode/utf8"
)

// queryFormatHint is the run-query formats in one sentence, for errors.
const queryFormatHint = `want one JSON object per line ({"qid", "text"} or a conversation turn {"conv_id", "turn", "question", "rewrite"}), or Pyserini/Anserini TSV topics (qid<TAB>query per line)`

// isTSVTopics reports whether a queries file is TSV topics: a .tsv name, or
// a first non-empty line that is not a JSON object and has a tab.
func isTSVTopics(path string, raw []byte) bool {
	if strings.EqualFold(filepath.Ext(path), ".tsv") {
		return true
	}
	for _, line := range bytes.Split(raw, []byte("\n")) {
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			continue
		}
		return t[0] != '{' && bytes.IndexByte(t, '\t') > 0
	}
	return false
}

// readTSVTopics reads qid<TAB>query lines (Anserini's TSV topics, MS MARCO
// queries.tsv); the query is retrieved for as written and has no user.
// Errors name file and line.
func readTSVTopics(path string, raw []byte) ([]RunQuery, error) {
	var out []RunQuery
	seen := map[string]int{}
	for i, line := range strings.Split(string(raw), "\n") {
		n := i + 1
		line = strings.TrimSuffix(line, "\r")
		if strings.TrimSpace(line) == "" {
			continue
		}
		if !utf8.ValidString(line) {
			return nil, fmt.Errorf("%s:%d: invalid UTF-8", path, n)
		}
		qid, query, ok := strings.Cut(line, "\t")
		qid, query = strings.TrimSpace(qid), strings.TrimSpace(query)
		switch {
		case !ok:
			return nil, fmt.Errorf("%s:%d: no tab: TSV topics have qid<TAB>query on every line (%s)", path, n, queryFormatHint)
		case qid == "":
			return nil, fmt.Errorf("%s:%d: empty qid before the tab", path, n)
		case strings.ContainsAny(qid, trecSpace):
			return nil, fmt.Errorf("%s:%d: qid %q contains whitespace", path, n, qid)
		case query == "":
			return nil, fmt.Errorf("%s:%d: qid %s has an empty query", path, n, qid)
		}
		if first, dup := seen[qid]; dup {
			return nil, fmt.Errorf("%s:%d: duplicate qid %s (first on line %d)", path, n, qid, first)
		}
		seen[qid] = n
		out = append(out, RunQuery{QID: qid, Text: query, Query: query})
	}
	return out, nil
}

// explainQueryLine adds the wanted formats to a queries line that is not a
// JSON object.
func explainQueryLine(line []byte, err error) error {
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '{' {
		return err
	}
	return fmt.Errorf("not a JSON object (%v): %s", err, queryFormatHint)
}
