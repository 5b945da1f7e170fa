package datasets

import (
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// HistoricalQuery is one query a user asked, the input of long-term memory.
type HistoricalQuery struct {
	User  string `json:"user"`
	Query string `json:"query"`
	// Time orders the user's queries: 1 for the first, 2 for the next, …
	// (conversations in order of first appearance, turns by turn number).
	Time   int64  `json:"time"`
	ConvID string `json:"conv_id"`
	Turn   int    `json:"turn"`
}

// HistoricalQueries lists each user's queries in time order, users in order
// of first appearance. The user is Turn.User (conv_id when empty); the query
// is the question as asked, or the reference rewrite where the source has no
// question (QReCC's SCAI sample). Turns that repeat an earlier path of the
// same tree (CAsT 2022, meta.duplicate_of_earlier_path) are left out, so a
// shared prefix is not remembered twice.
func HistoricalQueries(turns []Turn) []HistoricalQuery {
	type item struct {
		q              HistoricalQuery
		userAt, convAt int
	}
	userAt, convAt := map[string]int{}, map[string]int{}
	var items []item
	for _, t := range turns {
		if dup, _ := t.Meta["duplicate_of_earlier_path"].(bool); dup {
			continue
		}
		q := strings.TrimSpace(t.Question)
		if q == "" && t.Rewrite != nil {
			q = strings.TrimSpace(*t.Rewrite)
		}
		if q == "" {
			continue
		}
		user := t.User
		if user == "" {
			user = t.ConvID
		}
		if _, ok := userAt[user]; !ok {
			userAt[user] = len(userAt)
		}
		ck := user + "\x00" + t.ConvID
		if _, ok := convAt[ck]; !ok {
			convAt[ck] = len(convAt)
		}
		items = append(items, item{HistoricalQuery{User: user, Query: q, ConvID: t.ConvID, Turn: t.Turn}, userAt[user], convAt[ck]})
	}
	sort.SliceStable(items, func(i, j int) bool {
		a, b := items[i], items[j]
		if a.userAt != b.userAt {
			return a.userAt < b.userAt
		}
		if a.convAt != b.convAt {
			return a.convAt < b.convAt
		}
		return a.q.Turn < b.q.Turn
	})
	out := make([]HistoricalQuery, len(items))
	var prev string
	var n int64
	for i, it := range items {
		if it.q.User != prev {
			prev, n = it.q.User, 0
		}
		n++
		it.q.Time = n
		out[i] = it.q
	}
	return out
}

// Fact is one statement a user made about themselves, carried by the data
// (data.memory_field, e.g. iKAT's meta.ptkb): a long-term memory that is not
// a past question. ID is the source's id (a map key, or the 1-based position
// in a list).
type Fact struct {
	ID   string `json:"id"`
	Text string `json:"text"`
}

// memoryFieldKey returns the meta key a memory_field / memory_labels_field
// names ("meta.ptkb" → "ptkb").
func memoryFieldKey(field string) (string, error) {
	key, ok := strings.CutPrefix(field, "meta.")
	if !ok || key == "" {
		return "", fmt.Errorf("want meta.<key>, got %q", field)
	}
	return key, nil
}

// decodeFacts reads a memory field's value: a map id → text, or a list of
// texts (ids "1", "2", … by position) or of {"id", "text"} objects.
func decodeFacts(field string, v any) ([]Fact, error) {
	var out []Fact
	add := func(id string, text any, where string) error {
		s, ok := text.(string)
		if !ok {
			return fieldErrf(where, "want a string statement, got %s", jsonKind(text))
		}
		if strings.TrimSpace(s) == "" {
			return fieldErrf(where, "is empty")
		}
		out = append(out, Fact{ID: id, Text: strings.TrimSpace(s)})
		return nil
	}
	switch x := v.(type) {
	case nil:
		return nil, nil
	case map[string]any:
		ids := make([]string, 0, len(x))
		for id := range x {
			ids = append(ids, id)
		}
		sortIDs(ids)
		for _, id := range ids {
			if err := add(id, x[id], field+"."+id); err != nil {
				return nil, err
			}
		}
	case []any:
		seen := map[string]bool{}
		for i, e := range x {
			where := fmt.Sprintf("%s[%d]", field, i)
			if obj, ok := e.(map[string]any); ok {
				id := metaIDString(obj["id"])
				if id == "" {
					return nil, fieldErrf(where+".id", "is missing")
				}
				if seen[id] {
					return nil, fieldErrf(where+".id", "duplicate id %q", id)
				}
				seen[id] = true
				if err := add(id, obj["text"], where+".text"); err != nil {
					return nil, err
				}
				continue
			}
			if err := add(strconv.Itoa(i+1), e, where); err != nil {
				return nil, err
			}
		}
	default:
		return nil, fieldErrf(field, "want a map id → statement or a list of statements, got %s", jsonKind(v))
	}
	return out, nil
}

// decodeMemoryLabels reads a labels field: a list of ids (strings or
// integers), or one id; null and [] mean no memory was judged relevant.
func decodeMemoryLabels(field string, v any) ([]string, error) {
	var raw []any
	switch x := v.(type) {
	case nil:
		return nil, nil
	case []any:
		raw = x
	default:
		raw = []any{x}
	}
	out := make([]string, 0, len(raw))
	for i, e := range raw {
		id := metaIDString(e)
		if id == "" {
			return nil, fieldErrf(fmt.Sprintf("%s[%d]", field, i), "want a memory id (string or integer), got %s", jsonKind(e))
		}
		if !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out, nil
}

// metaIDString renders an id: strings as they are, integers in decimal; ""
// for anything else.
func metaIDString(v any) string {
	switch x := v.(type) {
	case string:
		return strings.TrimSpace(x)
	case json.Number:
		if _, err := x.Int64(); err == nil {
			return x.String()
		}
	case float64:
		if x == float64(int64(x)) {
			return strconv.FormatInt(int64(x), 10)
		}
	}
	return ""
}

func jsonKind(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number, float64:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "a list"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// sortIDs orders ids numerically when both are integers, else as strings.
func sortIDs(ids []string) {
	slices.SortFunc(ids, func(a, b string) int {
		ai, aerr := strconv.Atoi(a)
		bi, berr := strconv.Atoi(b)
		if aerr == nil && berr == nil {
			return ai - bi
		}
		return strings.Compare(a, b)
	})
}

// attachMemoryFields fills t.Facts and t.MemoryLabels from the configured
// meta fields; a label naming no fact of the turn is an error when the turn
// carries its facts (labels may otherwise name memories from another source,
// checked when memory is built).
func attachMemoryFields(t *Turn, memField, labelField string) error {
	if memField != "" {
		key, err := memoryFieldKey(memField)
		if err != nil {
			return err
		}
		if t.Facts, err = decodeFacts(memField, t.Meta[key]); err != nil {
			return err
		}
	}
	if labelField != "" {
		key, err := memoryFieldKey(labelField)
		if err != nil {
			return err
		}
		if t.MemoryLabels, err = decodeMemoryLabels(labelField, t.Meta[key]); err != nil {
			return err
		}
		if memField != "" {
			for i, id := range t.MemoryLabels {
				if !slices.ContainsFunc(t.Facts, func(f Fact) bool { return f.ID == id }) {
					return fieldErrf(fmt.Sprintf("%s[%d]", labelField, i), "id %q names no memory in %s", id, memField)
				}
			}
		}
	}
	return nil
}

// MemoryRecord is one long-term memory a user has, derived from the data: a
// fact (Seq 0: the user had it from the start) or an earlier question (Seq:
// its 1-based position in the user's question history, so a turn may see
// only memories with a smaller Seq).
type MemoryRecord struct {
	User string
	ID   string
	Text string
	Seq  int64
}

// UserMemories lists every user's memories carried by the turns: first the
// facts (each user's distinct fact ids in order of first appearance), then
// the questions in HistoricalQueries order with ids "q:<conv_id>#<turn>".
// Two turns of a user giving one fact id different texts is an error.
func UserMemories(turns []Turn) ([]MemoryRecord, error) {
	type key struct{ user, id string }
	seen := map[key]string{}
	var out []MemoryRecord
	for _, t := range turns {
		user := t.User
		if user == "" {
			user = t.ConvID
		}
		for _, f := range t.Facts {
			k := key{user, f.ID}
			if prev, ok := seen[k]; ok {
				if prev != f.Text {
					return nil, fmt.Errorf("turn %s: memory %q of user %q is %q here and %q in an earlier turn", t.ID(), f.ID, user, f.Text, prev)
				}
				continue
			}
			seen[k] = f.Text
			out = append(out, MemoryRecord{User: user, ID: f.ID, Text: f.Text})
		}
	}
	for _, q := range HistoricalQueries(turns) {
		id := fmt.Sprintf("q:%s#%d", q.ConvID, q.Turn)
		if _, ok := seen[key{q.User, id}]; ok {
			return nil, fmt.Errorf("user %q: fact id %q clashes with the id of a question memory", q.User, id)
		}
		out = append(out, MemoryRecord{User: q.User, ID: id, Text: q.Query, Seq: q.Time})
	}
	return out, nil
}
