package ir

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"
)

// RunQuery is one query of a TREC run: QID names it, Text is retrieved for
// (the rewrite), Query is the user's original query (memory activation),
// User the long-term-memory user.
type RunQuery struct {
	QID, Text, Query, User string
}

// ReadRunQueries reads a JSONL of queries: each line is either
// {"qid", "text"[, "query", "user"]} or a conversation turn {"conv_id",
// "turn", "question", "rewrite"} (qid = conv_id_turn, user = conv_id; field
// "rewrite" retrieves for the rewrite, falling back to the question, and
// "question" for the question). Errors name file, line and field.
func ReadRunQueries(path, field string) ([]RunQuery, error) {
	if field != "rewrite" && field != "question" {
		return nil, fmt.Errorf("read queries: field %q: want rewrite or question", field)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read queries: %w", err)
	}
	if isTSVTopics(path, raw) {
		return readTSVTopics(path, raw)
	}
	var out []RunQuery
	seen := map[string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec struct {
			QID      string          `json:"qid"`
			Text     string          `json:"text"`
			Query    string          `json:"query"`
			User     string          `json:"user"`
			ConvID   string          `json:"conv_id"`
			Turn     json.RawMessage `json:"turn"`
			Question string          `json:"question"`
			Rewrite  *string         `json:"rewrite"`
		}
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, line, explainQueryLine(sc.Bytes(), err))
		}
		q := RunQuery{QID: rec.QID, Text: rec.Text, Query: rec.Query, User: rec.User}
		if rec.ConvID != "" {
			turn := strings.Trim(string(rec.Turn), `"`)
			if q.QID == "" && (turn == "" || turn == "null") {
				return nil, fmt.Errorf("%s:%d: field \"turn\": missing (a turn's qid is conv_id_turn; or give qid)", path, line)
			}
			if q.QID == "" {
				q.QID = rec.ConvID + "_" + turn
			}
			if q.User == "" {
				q.User = rec.ConvID
			}
			q.Query = rec.Question
			q.Text = rec.Question
			if field == "rewrite" && rec.Rewrite != nil && strings.TrimSpace(*rec.Rewrite) != "" {
				q.Text = *rec.Rewrite
			}
		}
		if q.Query == "" {
			q.Query = q.Text
		}
		switch {
		case q.QID == "":
			return nil, fmt.Errorf("%s:%d: field \"qid\": missing (or give conv_id and turn)", path, line)
		case strings.TrimSpace(q.Text) == "":
			return nil, fmt.Errorf("%s:%d: field \"text\": no text to retrieve for", path, line)
		case strings.ContainsAny(q.QID, trecSpace):
			return nil, fmt.Errorf("%s:%d: field \"qid\": %q contains whitespace", path, line, q.QID)
		}
		// Two lines of one qid would write one query's ranking twice, with
		// its ranks restarting: a run trec_eval refuses (a docno twice).
		if first, dup := seen[q.QID]; dup {
			return nil, fmt.Errorf("%s:%d: field \"qid\": duplicate qid %s (first on line %d)", path, line, q.QID, first)
		}
		seen[q.QID] = line
		out = append(out, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// trecSpace is what separates a TREC run's fields (C's isspace), so none of
// it may appear inside a qid.
const trecSpace = " \t\n\v\f\r"
