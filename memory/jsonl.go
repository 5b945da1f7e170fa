package memory

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// ReadJSONL reads a JSONL of memories, one per line:
//
//	{"user", "id", "text", "time", "topic", "subtopic", "importance", "entities"}
//
// user and text are required ("query" is accepted for text: a file of past
// queries); id defaults to the line's position among the user's memories
// ("m1", "m2", …); time is RFC 3339 or Unix seconds; importance in [0, 1];
// entities a list of strings (lowercased). An unknown field, a wrong type or
// a bad value is an error naming the file, line and field.
func ReadJSONL(path string) ([]Entry, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read memories: %w", err)
	}
	var out []Entry
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
		e := Entry{User: rec.User, ID: id, Text: strings.TrimSpace(text), Time: t, Topic: rec.Topic, Subtopic: rec.Subtopic}
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
	// RFC 3339's years, 0001–9999: the range a Parquet microsecond timestamp
	// holds. Nanoseconds in an int64 end in 2262, so a later time converted
	// through them would wrap to another date without a word.
	if !(sec >= minUnixSeconds && sec <= maxUnixSeconds) {
		return time.Time{}, fmt.Errorf("%s Unix seconds: outside the years 0001–9999", s)
	}
	whole := math.Floor(sec)
	return time.Unix(int64(whole), int64(math.Round((sec-whole)*1e9))).UTC(), nil
}

// The Unix seconds of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z.
const minUnixSeconds, maxUnixSeconds = -62135596800, 253402300799
