package retrieval

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/himes-rl/himes/memory"
)

// CausalRetriever keeps long-term memory online and causal: a user's memory
// at a turn is what the user had before it (see memory.History). A query the
// view knows (a question of the conversations the memory was built from) is
// retrieved at its position in its user's history; any other query (an
// ad-hoc search) sees all of the user's memories.
type CausalRetriever struct {
	*Pipeline
	history *memory.History
}

// NewCausalRetriever returns the causal view of p for the given entries
// (the memories it was, or will be, built from).
func NewCausalRetriever(p *Pipeline, entries []memory.Entry) *CausalRetriever {
	return &CausalRetriever{Pipeline: p, history: memory.NewHistory(entries)}
}

// Position returns the Seq of query in user's question history (0 when the
// view does not know it).
func (c *CausalRetriever) Position(user, query string) int64 { return c.history.Position(user, query) }

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

// ActivateBefore returns the top n memories user had before asking query,
// activated with query and the signal weights sig: what a prompt may show
// (see memory.Store.ActivateBefore: a query the view cannot place sees the
// user's facts and imported memories only). Without memory it returns none.
func (c *CausalRetriever) ActivateBefore(ctx context.Context, user, query string, sig memory.Signals, n int) ([]memory.Activated, error) {
	m := c.Memory()
	if m == nil {
		return nil, nil
	}
	return m.ActivateBefore(ctx, user, query, c.Position(user, query), sig, n)
}

// AttachMemory gives p the long-term memory of the data: the memories
// loaded from retrieval.memory.partitions (if any) together with entries
// (the users' facts and questions from the conversations the run sees, see
// datasets.UserMemories; memory.Merge), and returns the causal view that
// rollouts and evaluations must use.
func AttachMemory(ctx context.Context, cfg memory.Config, p *Pipeline, entries []memory.Entry) (*CausalRetriever, error) {
	emb, err := p.MemoryEmbedder()
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	if loaded, shared := sharedUsers(p.memBase, entries); loaded > 0 && shared == 0 && len(entries) > 0 {
		// Memories are activated per user: a store keyed by other ids (built
		// with another data.user_field, or for other people) adds nothing,
		// while the data's own questions still activate, so the run looks
		// as if the loaded memories had been used.
		slog.Warn("long-term memory: none of the users of retrieval.memory.partitions asks a question in this data, so its memories never activate (was it built with the same data.user_field?)",
			"partitions", cfg.Partitions, "users_in_partitions", loaded)
	}
	all, err := memory.Merge(p.memBase, entries, cfg.Partitions)
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	mem, err := memory.Build(ctx, cfg, emb, all)
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	if err := p.SetMemory(mem); err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	slog.Info("long-term memory built", "memories", mem.Len(), "loaded", len(p.memBase), "from_data", mem.Len()-len(p.memBase))
	return NewCausalRetriever(p, mem.Entries()), nil
}

// sharedUsers counts the users of loaded and how many of them also have an
// entry in fromData.
func sharedUsers(loaded, fromData []memory.Entry) (users, shared int) {
	inData := map[string]bool{}
	for _, e := range fromData {
		inData[e.User] = true
	}
	seen := map[string]bool{}
	for _, e := range loaded {
		if seen[e.User] {
			continue
		}
		seen[e.User] = true
		if inData[e.User] {
			shared++
		}
	}
	return len(seen), shared
}
