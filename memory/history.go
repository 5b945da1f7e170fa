package memory

import (
	"context"
	"fmt"
)

// History places questions in their users' question histories, which keeps
// long-term memory online and causal: a user's memory at a turn is what the
// user had before it (their facts and imported memories, Seq 0, and the
// questions they asked earlier), never the turn's own or a later question.
type History struct {
	asked map[string]int64 // user + "\x00" + text → Seq when the user first asked it
}

// NewHistory returns the history of the questions among entries (the
// memories a store was, or will be, built from).
func NewHistory(entries []Entry) *History {
	h := &History{asked: make(map[string]int64, len(entries))}
	for _, e := range entries {
		if e.Seq <= 0 {
			continue
		}
		key := e.User + "\x00" + e.Text
		if old, ok := h.asked[key]; !ok || e.Seq < old {
			h.asked[key] = e.Seq
		}
	}
	return h
}

// Position returns the Seq of query in user's question history (0 when the
// history does not know it: an ad-hoc query, which sees every memory).
func (h *History) Position(user, query string) int64 { return h.asked[user+"\x00"+query] }

// Merge returns the memories loaded from a file (source names it) together
// with data, the users' facts and questions from the conversations a run
// sees. An entry of data whose (user, id) a loaded memory already has is that
// memory and is skipped; with another text it is an error.
func Merge(loaded, data []Entry, source string) ([]Entry, error) {
	all := append([]Entry(nil), loaded...)
	have := make(map[[2]string]string, len(all))
	for _, e := range all {
		have[[2]string{e.User, e.ID}] = e.Text
	}
	for _, e := range data {
		if text, ok := have[[2]string{e.User, e.ID}]; ok {
			if text != e.Text {
				return nil, fmt.Errorf("user %q memory %q is %q in %s but %q in the data", e.User, e.ID, text, source, e.Text)
			}
			continue
		}
		all = append(all, e)
	}
	return all, nil
}

// ActivateBefore returns the top n memories user had before asking query at
// position seq of their history (see History.Position), activated with
// query and the signal weights sig: what a prompt may show. It is strict
// about time: a query of unknown position (seq 0) sees the user's facts and
// imported memories only, never a question, so no prompt shows a question
// asked after it. For a user without memories it returns none.
func (m *Store) ActivateBefore(ctx context.Context, user, query string, seq int64, sig Signals, n int) ([]Activated, error) {
	if n <= 0 || !m.HasUser(user) {
		return nil, nil
	}
	if seq == 0 {
		seq = 1 // only Seq-0 memories are visible before the first question
	}
	qv, err := m.emb.Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embed query for memory: %w", err)
	}
	mems, err := m.ActivateTop(ctx, user, query, qv[0], seq, sig, n)
	if err != nil {
		return nil, fmt.Errorf("activate memories: %w", err)
	}
	return mems, nil
}
