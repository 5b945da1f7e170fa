package retrieval

import (
	"context"
	"fmt"
	"log/slog"
)

// CausalRetriever keeps long-term memory online and causal: a user's memory
// at a turn is what the user had before it — their facts and imported
// memories (Seq 0) and the questions they asked earlier — never the turn's
// own or a later question. A query the view knows (a question of the
// conversations the memory was built from) is retrieved at its position in
// its user's history; any other query (an ad-hoc search) sees all of the
// user's memories.
type CausalRetriever struct {
	*Pipeline
	asked map[string]int64 // user + "\x00" + text → Seq when the user first asked it
}

// NewCausalRetriever returns the causal view of p for the given entries
// (the memories it was, or will be, built from).
func NewCausalRetriever(p *Pipeline, entries []MemoryEntry) *CausalRetriever {
	c := &CausalRetriever{Pipeline: p, asked: make(map[string]int64, len(entries))}
	for _, e := range entries {
		if e.Seq <= 0 {
			continue
		}
		key := e.User + "\x00" + e.Text
		if old, ok := c.asked[key]; !ok || e.Seq < old {
			c.asked[key] = e.Seq
		}
	}
	return c
}

// Position returns the Seq of query in user's question history (0 when the
// view does not know it).
func (c *CausalRetriever) Position(user, query string) int64 { return c.asked[user+"\x00"+query] }

// Retrieve runs the pipeline with the memory restricted to what the user had
// before this query, when the view knows when that was.
func (c *CausalRetriever) Retrieve(ctx context.Context, user, rewrite, query string) (Result, error) {
	return c.Pipeline.RetrieveAt(ctx, user, rewrite, query, c.Position(user, query))
}

// RetrieveBatch is Retrieve for many requests (see BatchRetriever).
func (c *CausalRetriever) RetrieveBatch(ctx context.Context, reqs []Request) ([]Result, []error) {
	rs := make([]Request, len(reqs))
	for i, r := range reqs {
		rs[i] = r
		rs[i].Seq = c.Position(r.User, r.Query)
	}
	return c.Pipeline.RetrieveBatch(ctx, rs)
}

// ActivateBefore returns the top n memories user had before asking query
// (facts, imported memories and earlier questions), activated with query
// and the signal weights sig: what a prompt may show. Unlike Retrieve it is
// strict about time: a query the view does not know (it cannot be placed in
// the user's history) sees the user's facts and imported memories only,
// never a question, so no prompt shows a question asked after it. Without
// memory, or for a user without memories, it returns none.
func (c *CausalRetriever) ActivateBefore(ctx context.Context, user, query string, sig MemorySignals, n int) ([]Memory, error) {
	m := c.Memory()
	if m == nil || n <= 0 || !m.HasUser(user) {
		return nil, nil
	}
	seq := c.Position(user, query)
	if seq == 0 {
		seq = 1 // only Seq-0 memories are visible before the first question
	}
	qv, err := m.Embedder().Embed(ctx, []string{query})
	if err != nil {
		return nil, fmt.Errorf("embed query for memory: %w", err)
	}
	mems, err := m.ActivateTop(ctx, user, query, qv[0], seq, sig, n)
	if err != nil {
		return nil, fmt.Errorf("activate memories: %w", err)
	}
	return mems, nil
}

// AttachMemory gives p the long-term memory of the data: the memories
// loaded from retrieval.memory.partitions (if any) together with entries
// (the users' facts and questions from the conversations the run sees, see
// datasets.UserMemories), and returns the causal view that rollouts and
// evaluations must use. An entry whose (user, id) the loaded memories
// already hold is that memory and is skipped; with another text it is an
// error.
func AttachMemory(ctx context.Context, cfg MemoryConfig, p *Pipeline, entries []MemoryEntry) (*CausalRetriever, error) {
	emb, err := p.Embedder()
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	all := append([]MemoryEntry(nil), p.memBase...)
	have := make(map[[2]string]string, len(all))
	for _, e := range all {
		have[[2]string{e.User, e.ID}] = e.Text
	}
	for _, e := range entries {
		if text, ok := have[[2]string{e.User, e.ID}]; ok {
			if text != e.Text {
				return nil, fmt.Errorf("long-term memory: user %q memory %q is %q in %s but %q in the data", e.User, e.ID, text, cfg.Partitions, e.Text)
			}
			continue
		}
		all = append(all, e)
	}
	mem, err := BuildMemory(ctx, cfg, emb, all)
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	if err := p.SetMemory(mem); err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	slog.Info("long-term memory built", "memories", mem.Len(), "loaded", len(p.memBase), "from_data", mem.Len()-len(p.memBase))
	return NewCausalRetriever(p, mem.Entries()), nil
}
