package retrieval

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sync"
	"testing"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
)

// prefetching is an embedder that keeps its vectors, like the served one
// (embedding.Ollama): it records every text it computes and each call that
// computed any.
type prefetching struct {
	inner embedding.Embedder
	mu    sync.Mutex
	memo  map[string][]float32
	calls int      // Embed calls that computed at least one vector
	texts []string // every text computed, in order
}

func (e *prefetching) Dim() int     { return e.inner.Dim() }
func (e *prefetching) Name() string { return e.inner.Name() }

func (e *prefetching) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := make([][]float32, len(texts))
	var missing []string
	for i, t := range texts {
		if v, ok := e.memo[t]; ok {
			out[i] = v
		} else if !slices.Contains(missing, t) {
			missing = append(missing, t)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	vs, err := e.inner.Embed(ctx, missing)
	if err != nil {
		return nil, err
	}
	e.calls++
	for j, t := range missing {
		e.memo[t] = vs[j]
		e.texts = append(e.texts, t)
	}
	for i, t := range texts {
		out[i] = e.memo[t]
	}
	return out, nil
}

func (e *prefetching) Prefetch(ctx context.Context, texts []string) error {
	_, err := e.Embed(ctx, texts)
	return err
}

// RetrieveBatch with an embedder that keeps its vectors embeds ahead, in
// one call per stage (dense queries, memory queries, re-ranked candidates),
// each distinct text once; its results are those of the same pipeline
// without prefetching, retrieving one request at a time.
func TestRetrieveBatchPrefetchSameResults(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	questions := map[string][]string{
		"ann": {"garage door opener noise", "garage door springs", "which lubrication for the door", "red wine with fish"},
		"bob": {"red wine", "white wine with fish", "garage door opener battery", "red wine"},
	}
	var entries []memory.Entry
	var reqs []Request
	for _, u := range []string{"ann", "bob"} {
		entries = append(entries, memory.Entry{User: u, ID: "f1", Text: u + " owns a garage door and likes wine"})
		for i, q := range questions[u] {
			entries = append(entries, memory.Entry{User: u, ID: fmt.Sprintf("q%d", i+1), Text: q, Seq: int64(i + 1)})
			reqs = append(reqs, Request{User: u, Rewrite: q + " please", Query: q})
		}
	}
	reqs = append(reqs, reqs...) // a second system asking the same
	for _, method := range []string{"bm25", "hybrid"} {
		t.Run(method, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Method = method
			cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.MinPartition = true, 3, 1000
			cfg.Memory.RerankFloor = 0 // re-rank every request with memories
			open := func(pf bool) (*CausalRetriever, *prefetching) {
				p, err := Open(t.Context(), cfg, kb)
				if err != nil {
					t.Fatal(err)
				}
				var e *prefetching
				if pf {
					e = &prefetching{inner: p.emb, memo: map[string][]float32{}}
					p.emb, p.memEmb = e, e
				}
				c, err := AttachMemory(t.Context(), cfg.Memory, p, entries)
				if err != nil {
					t.Fatal(err)
				}
				return c, e
			}
			plain, _ := open(false)
			var want []Result
			for _, r := range reqs {
				res, err := plain.Retrieve(t.Context(), r.User, r.Rewrite, r.Query)
				if err != nil {
					t.Fatal(err)
				}
				want = append(want, res)
			}
			batched, e := open(true)
			e.calls, e.texts = 0, nil // forget the memories' own embedding
			got, errs := batched.RetrieveBatch(t.Context(), reqs)
			for i, err := range errs {
				if err != nil {
					t.Fatalf("request %d: %v", i, err)
				}
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("batched results differ from one-at-a-time")
			}
			reranked := 0
			for _, r := range got {
				if r.Trace.Reranked {
					reranked++
				}
			}
			if reranked == 0 {
				t.Fatal("no request was re-ranked: the test checks nothing about candidates")
			}
			// dense queries (hybrid), memory queries, candidates (bm25: no
			// dense index to take them from; two rounds, the first k of each
			// request, then those that can still reach its top k): at most
			// one call each
			wantCalls := map[string]int{"bm25": 3, "hybrid": 2}[method]
			if e.calls > wantCalls {
				t.Errorf("%d embedding calls, want ≤ %d (one per stage and round)", e.calls, wantCalls)
			}
			if e.calls == 0 { // the candidates (bm25), the dense queries (hybrid)
				t.Errorf("no embedding call through the prefetcher: the stages went around it")
			}
			seen := map[string]bool{}
			for _, s := range e.texts {
				if seen[s] {
					t.Errorf("text %q embedded twice", s)
				}
				seen[s] = true
			}
		})
	}
}
