package retrieval

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
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
// Pyserini/Anserini TSV topics (qid<TAB>query) are read too (readTSVTopics).
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
			pid = ChunkPassageID(c.ID)
		}
		add(pid, c.Score)
	}
	for _, c := range res.Trace.Candidates {
		add(ChunkPassageID(c.ID), c.Score)
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

// ReadMemories reads a JSONL of memories, one per line:
//
//	{"user", "id", "text", "time", "topic", "subtopic", "importance", "entities"}
//
// user and text are required ("query" is accepted for text: a file of past
// queries); id defaults to the line's position among the user's memories
// ("m1", "m2", …); time is RFC 3339 or Unix seconds; importance in [0, 1];
// entities a list of strings (lowercased). An unknown field, a wrong type or
// a bad value is an error naming the file, line and field.
func ReadMemories(path string) ([]MemoryEntry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read memories: %w", err)
	}
	var out []MemoryEntry
	perUser := map[string]int{}
	seen := map[[2]string]int{}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for line := 1; sc.Scan(); line++ {
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec struct {
			User       string          `json:"user"`
			ID         json.RawMessage `json:"id"`
			Text       string          `json:"text"`
			Query      string          `json:"query"`
			Time       json.RawMessage `json:"time"`
			Topic      string          `json:"topic"`
			Subtopic   string          `json:"subtopic"`
			Importance *float64        `json:"importance"`
			Entities   []string        `json:"entities"`
		}
		dec := json.NewDecoder(bytes.NewReader(sc.Bytes()))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) && te.Field != "" {
				return nil, fmt.Errorf("%s:%d: field %q: want %s, got %s", path, line, te.Field, te.Type, te.Value)
			}
			return nil, fmt.Errorf("%s:%d: %w", path, line, err)
		}
		if rec.User == "" {
			return nil, fmt.Errorf("%s:%d: field \"user\": missing", path, line)
		}
		if rec.Text != "" && rec.Query != "" {
			return nil, fmt.Errorf("%s:%d: field \"query\": give text or query, not both", path, line)
		}
		text := rec.Text + rec.Query
		if strings.TrimSpace(text) == "" {
			return nil, fmt.Errorf("%s:%d: field \"text\": missing or empty", path, line)
		}
		perUser[rec.User]++
		id, err := memoryID(rec.ID)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: field \"id\": %w", path, line, err)
		}
		if id == "" {
			id = fmt.Sprintf("m%d", perUser[rec.User])
		}
		if first, dup := seen[[2]string{rec.User, id}]; dup {
			return nil, fmt.Errorf("%s:%d: field \"id\": user %q already has memory %q (line %d)", path, line, rec.User, id, first)
		}
		seen[[2]string{rec.User, id}] = line
		t, err := parseMemoryTime(rec.Time)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: field \"time\": %w", path, line, err)
		}
		e := MemoryEntry{User: rec.User, ID: id, Text: strings.TrimSpace(text), Time: t, Topic: rec.Topic, Subtopic: rec.Subtopic}
		if rec.Importance != nil {
			if v := *rec.Importance; !(v >= 0 && v <= 1) {
				return nil, fmt.Errorf("%s:%d: field \"importance\": must be in [0, 1], got %v", path, line, v)
			}
			e.Importance = *rec.Importance
		}
		if (rec.Topic == "") != (rec.Subtopic == "") {
			return nil, fmt.Errorf("%s:%d: field \"subtopic\": give topic and subtopic together, or neither", path, line)
		}
		if rec.Entities != nil {
			e.Entities = make([]string, 0, len(rec.Entities))
			for _, x := range rec.Entities {
				if x = strings.ToLower(strings.TrimSpace(x)); x != "" {
					e.Entities = append(e.Entities, x)
				}
			}
		}
		out = append(out, e)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return out, nil
}

// memoryID reads an id given as a string or an integer.
func memoryID(raw json.RawMessage) (string, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return "", nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return "", err
		}
		return strings.TrimSpace(str), nil
	}
	if _, err := strconv.ParseInt(s, 10, 64); err != nil {
		return "", fmt.Errorf("want a string or an integer, got %s", s)
	}
	return s, nil
}

func parseMemoryTime(raw json.RawMessage) (time.Time, error) {
	s := strings.TrimSpace(string(raw))
	if s == "" || s == "null" {
		return time.Time{}, nil
	}
	if strings.HasPrefix(s, `"`) {
		var str string
		if err := json.Unmarshal(raw, &str); err != nil {
			return time.Time{}, err
		}
		t, err := time.Parse(time.RFC3339, str)
		if err != nil {
			return time.Time{}, fmt.Errorf("want RFC 3339 or Unix seconds: %w", err)
		}
		return t.UTC(), nil
	}
	sec, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("want RFC 3339 or Unix seconds, got %s", s)
	}
	return time.Unix(0, int64(sec*1e9)).UTC(), nil
}
