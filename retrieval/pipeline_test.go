package retrieval

import (
	"math"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/himes-rl/himes/embedding"
	"github.com/himes-rl/himes/memory"
)

const tinyKB = `{"id":"p1","title":"Garage doors","text":"A garage door opener that is going bad makes grinding noises and reverses."}
{"id":"p2","title":"Openers","text":"Replace the garage door opener remote battery first when the door stops responding."}
{"id":"p3","title":"Wine","text":"Red wine pairs with red meat; white wine with fish."}
{"id":"p4","title":"Doors","text":"Sliding doors and garage door springs need lubrication every year."}
`

func TestPipelineRetrieveWithAndWithoutMemory(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.TopK, cfg.Candidates = 2, 4
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Retrieve(t.Context(), "u", "garage door opener", "is it going bad?")
	if err != nil {
		t.Fatal(err)
	}
	// memory off: the final ranking is the retrieval order
	if len(res.Chunks) != 2 || len(res.Trace.Candidates) != 3 {
		t.Fatalf("got %d chunks, %d candidates", len(res.Chunks), len(res.Trace.Candidates))
	}
	for i, c := range res.Chunks {
		if c.ID != res.Trace.Candidates[i].ID || c.Score != res.Trace.Candidates[i].Score {
			t.Fatalf("memory off changed the order: %+v vs %+v", res.Chunks, res.Trace.Candidates)
		}
	}
	if len(res.Trace.Memories) != 0 {
		t.Fatal("memories activated with memory off")
	}
	// empty rewrite falls back to the query
	res2, _ := p.Retrieve(t.Context(), "u", "  ", "red wine")
	if res2.Chunks[0].PassageID != "p3" {
		t.Fatalf("empty rewrite: top %s", res2.Chunks[0].ID)
	}

	// memory on: the user's history is about springs and lubrication; the
	// paper's setting, pure mean-similarity re-rank, always applied
	cfg.Memory.Enabled, cfg.Memory.TopN = true, 2
	cfg.Memory.RetrievalWeight, cfg.Memory.RerankFloor = 0, 0
	pm, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	emb, _ := pm.Embedder()
	t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
	mem, err := memory.Build(t.Context(), cfg.Memory, emb, []memory.Entry{
		{User: "u", Text: "garage door springs lubrication", Time: t0},
		{User: "u", Text: "sliding doors need lubrication", Time: t0.Add(time.Hour)},
		{User: "other", Text: "garage door opener remote battery", Time: t0},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := pm.SetMemory(mem); err != nil {
		t.Fatal(err)
	}
	res, err = pm.Retrieve(t.Context(), "u", "garage door opener", "garage door problems")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Trace.Memories) == 0 {
		t.Fatal("no memories activated")
	}
	for _, m := range res.Trace.Memories {
		if strings.Contains(m.Text, "battery") {
			t.Fatal("another user's memory activated")
		}
	}
	// independent check: rank the candidates by mean cosine with the
	// activated memories' embeddings
	var memVecs [][]float32
	for _, m := range res.Trace.Memories {
		v, _ := emb.Embed(t.Context(), []string{m.Text})
		memVecs = append(memVecs, v[0])
	}
	type sc struct {
		id string
		s  float64
	}
	var want []sc
	for _, c := range res.Trace.Candidates {
		ch, _ := pm.Chunk(c.ID)
		cv, _ := emb.Embed(t.Context(), []string{ch.Title + " " + ch.Text})
		s := 0.0
		for _, h := range memVecs {
			s += embedding.Cosine(cv[0], h)
		}
		want = append(want, sc{c.ID, s / float64(len(memVecs))})
	}
	slices.SortStableFunc(want, func(a, b sc) int {
		if a.s > b.s {
			return -1
		} else if a.s < b.s {
			return 1
		}
		return 0
	})
	for i, c := range res.Chunks {
		if c.ID != want[i].id || math.Abs(c.Score-want[i].s) > 1e-9 {
			t.Fatalf("rank %d: got %s %.6f, want %s %.6f", i+1, c.ID, c.Score, want[i].id, want[i].s)
		}
	}
	if res.Chunks[0].PassageID != "p4" {
		t.Fatalf("springs/lubrication history should lift p4, got %s", res.Chunks[0].PassageID)
	}
	// a user without history: retrieval order
	res3, _ := pm.Retrieve(t.Context(), "nobody", "garage door opener", "garage door problems")
	if res3.Chunks[0].ID != res3.Trace.Candidates[0].ID {
		t.Fatal("empty H_n changed the ranking")
	}
	// concurrent use
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			if _, err := pm.Retrieve(t.Context(), "u", "garage door", "door"); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
}

func TestPipelineDenseAndHybrid(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	for _, method := range []string{"dense", "hybrid"} {
		cfg := DefaultConfig()
		cfg.Method, cfg.TopK, cfg.Candidates = method, 1, 4
		p, err := Open(t.Context(), cfg, kb)
		if err != nil {
			t.Fatal(err)
		}
		res, err := p.Retrieve(t.Context(), "", "white wine with fish", "")
		if err != nil {
			t.Fatal(err)
		}
		if res.Chunks[0].PassageID != "p3" {
			t.Errorf("%s: top %s, want p3", method, res.Chunks[0].ID)
		}
	}
}

func TestPipelineChunkingAndIDF(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.ChunkWords, cfg.ChunkStride = 6, 3
	p, err := Open(t.Context(), cfg, kb)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Chunks()) <= 4 {
		t.Fatalf("%d chunks from 4 passages with 6-word windows", len(p.Chunks()))
	}
	if p.PassageOf("p1#1") != "p1" || p.PassageOf("nope") != "" {
		t.Fatal("PassageOf")
	}
	if p.IDF("garage") <= 0 || p.IDF("zebra") != 0 {
		t.Fatal("IDF")
	}
	if got := p.Tokenize("Garage-Door"); !slices.Equal(got, []string{"garage", "door"}) {
		t.Fatalf("Tokenize: %v", got)
	}
}

// memory.activate_with rewrite activates with the rewriter's output: an
// anaphoric question ("is it noisy?") shares no word with the user's
// memories, its rewrite does.
func TestMemoryActivatesWithTheRewrite(t *testing.T) {
	kb := writeFile(t, "kb.jsonl", tinyKB)
	cfg := DefaultConfig()
	cfg.TopK, cfg.Candidates = 2, 4
	cfg.Memory.Enabled, cfg.Memory.TopN, cfg.Memory.MinPartition = true, 1, 1000
	activated := func(with string) string {
		t.Helper()
		c := cfg
		c.Memory.ActivateWith = with
		if err := c.Validate(); err != nil {
			t.Fatal(err)
		}
		p, err := Open(t.Context(), c, kb)
		if err != nil {
			t.Fatal(err)
		}
		emb, _ := p.Embedder()
		t0 := time.Date(2024, 5, 1, 0, 0, 0, 0, time.UTC)
		mem, err := memory.Build(t.Context(), c.Memory, emb, []memory.Entry{
			{User: "u", Text: "my garage door opener", Time: t0},
			{User: "u", Text: "is red wine noisy", Time: t0.Add(time.Hour)},
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := p.SetMemory(mem); err != nil {
			t.Fatal(err)
		}
		res, err := p.Retrieve(t.Context(), "u", "garage door opener grinding", "is it noisy")
		if err != nil {
			t.Fatal(err)
		}
		if len(res.Trace.Memories) != 1 {
			t.Fatalf("activate_with %q: %d memories", with, len(res.Trace.Memories))
		}
		return res.Trace.Memories[0].Text
	}
	if got := activated("question"); got != "is red wine noisy" {
		t.Errorf("activated with the question: %q, want the memory sharing its words", got)
	}
	if got := activated("rewrite"); got != "my garage door opener" {
		t.Errorf("activated with the rewrite: %q, want the memory sharing the rewrite's words", got)
	}
	bad := cfg
	bad.Memory.ActivateWith = "answer"
	if err := bad.Validate(); err == nil || !strings.Contains(err.Error(), "activate_with") {
		t.Errorf("activate_with answer: %v, want an error naming the field", err)
	}
}
