package retrieval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/himes-rl/himes/retrieval/corpus"
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
	var out []RunQuery
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
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		q := RunQuery{QID: rec.QID, Text: rec.Text, Query: rec.Query, User: rec.User}
		if rec.ConvID != "" {
			turn := strings.Trim(string(rec.Turn), `"`)
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
		case strings.ContainsAny(q.QID, " \t"):
			return nil, fmt.Errorf("%s:%d: field \"qid\": %q contains whitespace", path, line, q.QID)
		}
		out = append(out, q)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// PassageRanking is the passage-level ranking of a result, as written to a
// TREC run and scored by the IR metrics: the final chunks, then the other
// candidates, each passage at its best position. When the scores disagree
// with that order as trec_eval would sort them (after memory re-ranking the
// two stages' scores are not comparable), they are replaced by n−rank so
// trec_eval sorts exactly as displayed. Training, eval and search all use it.
func PassageRanking(res Result) []Scored {
	seen := map[string]bool{}
	var run []Scored
	add := func(pid string, s float64) {
		if pid != "" && !seen[pid] {
			seen[pid] = true
			run = append(run, Scored{ID: pid, Score: s})
		}
	}
	for _, c := range res.Chunks {
		pid := c.PassageID
		if pid == "" {
			pid = corpus.ChunkPassageID(c.ID)
		}
		add(pid, c.Score)
	}
	for _, c := range res.Trace.Candidates {
		add(corpus.ChunkPassageID(c.ID), c.Score)
	}
	for i := 1; i < len(run); i++ {
		// trec_eval orders by score, then docno descending
		if a, b := run[i-1], run[i]; b.Score > a.Score || (b.Score == a.Score && b.ID > a.ID) {
			for j := range run {
				run[j].Score = float64(len(run) - j)
			}
			break
		}
	}
	return run
}

// PassageRanking is the package function PassageRanking, for callers that
// hold a pipeline.
func (p *Pipeline) PassageRanking(res Result) []Scored { return PassageRanking(res) }
