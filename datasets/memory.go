package datasets

import (
	"sort"
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
