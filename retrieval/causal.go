package retrieval

import (
	"context"
	"fmt"
	"log/slog"
	"time"
)

// CausalRetriever keeps long-term memory causal: when the memory holds the
// users' own conversations (as when it is built from the training data), a
// turn may activate only the queries its user asked before it, never the
// turn's own or a later one. Queries the memory does not know (other users,
// new data) see all of the user's memories.
type CausalRetriever struct {
	*Pipeline
	asked map[string]time.Time // user + "\x00" + query → when the user first asked it
}

// NewCausalRetriever returns the causal view of p for the given entries
// (the queries the memory was, or will be, built from).
func NewCausalRetriever(p *Pipeline, entries []MemoryEntry) *CausalRetriever {
	c := &CausalRetriever{Pipeline: p, asked: make(map[string]time.Time, len(entries))}
	for _, e := range entries {
		key := e.User + "\x00" + e.Query
		if _, ok := c.asked[key]; !ok {
			c.asked[key] = e.Time
		}
	}
	return c
}

// Retrieve runs the pipeline with the memory restricted to what the user had
// asked before this query, when the memory knows when that was.
func (c *CausalRetriever) Retrieve(ctx context.Context, user, rewrite, query string) (Result, error) {
	if at, ok := c.asked[user+"\x00"+query]; ok {
		return c.Pipeline.RetrieveAt(ctx, user, rewrite, query, at)
	}
	return c.Pipeline.Retrieve(ctx, user, rewrite, query)
}

// RetrieveBatch is Retrieve for many requests (see BatchRetriever).
func (c *CausalRetriever) RetrieveBatch(ctx context.Context, reqs []Request) ([]Result, []error) {
	rs := make([]Request, len(reqs))
	for i, r := range reqs {
		rs[i] = r
		if at, ok := c.asked[r.User+"\x00"+r.Query]; ok {
			rs[i].At = at
		}
	}
	return c.Pipeline.RetrieveBatch(ctx, rs)
}

// AttachMemory gives p a long-term memory built from entries (the users'
// earlier questions), unless p already has one (partitions loaded from
// retrieval.memory.partitions), and returns the causal view that rollouts and
// evaluations must use.
func AttachMemory(ctx context.Context, cfg MemoryConfig, p *Pipeline, entries []MemoryEntry) (*CausalRetriever, error) {
	causal := NewCausalRetriever(p, entries)
	if p.Memory() != nil {
		return causal, nil
	}
	emb, err := p.Embedder()
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	mem, err := BuildMemory(ctx, cfg, emb, entries)
	if err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	if err := p.SetMemory(mem); err != nil {
		return nil, fmt.Errorf("long-term memory: %w", err)
	}
	slog.Info("long-term memory built from the training conversations", "memories", mem.Len())
	return causal, nil
}
